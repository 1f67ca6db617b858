"""``torch.compile(fullgraph=True)`` of models built from fluxlite's parallel layers on 2 CPU ranks
(gloo), forward and backward: one graph (no graph break, no recompile on fresh data), results equal to
eager and to float64.

1. **Layers** (inductor; a C++ compiler is needed, CI's machines have g++; without one ``aot_eager``,
   which still runs Dynamo, the fake implementations and AOTAutograd). Three Column -> GELU -> Row
   blocks on this rank's rows ``[m, K]``:

   - sequence parallel, ``overlap="fused"`` (the CPU tile protocol; the Column's backward gathers
     its input again with a functional all-gather, the Row's runs ``fluxlite::ag_gemm_gathered``);
   - sequence parallel, Column ``"sequential"`` (its backward runs the dgrad matmul and leaves a
     functional reduce-scatter in flight while wgrad computes, all traced), Row ``"auto"`` (the op
     decides when it runs);
   - no sequence parallelism, between ``gather_from_sequence_parallel_region`` and
     ``scatter_to_sequence_parallel_region``: the layers' eager autograd functions (matmuls and
     functional all-reduces), traced by Dynamo.

   Checked: output, input grad and every parameter grad against float64 and against the same model
   uncompiled; the compiled graph holds 4 fluxlite ops (2 AG-GEMMs, 2 GEMM-RSs).
2. **scripts/train_gpt.py's GPT** (sequence parallel; ``aot_eager`` on CPU, to keep CI short): loss and
   every parameter grad against eager, over two batches; the loss against the single-process
   ``nn.Linear`` twin. :func:`gpt_compiled_vs_eager` also serves the GPU test (tests/test_parallel_gpu.py).

Tolerance: tests/numerics.py, fp32 (``1e-5 * (|ref| + rms(ref))``). Ranks run in deterministic mode
(every ``torch.empty`` is NaN-filled). Each test pays one cold compile into a fresh cache directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from .dist_utils import run_ranks
from .numerics import check, poison_empty_tensors, randn

F32 = torch.float32
BACKEND = "inductor" if shutil.which("g++") or shutil.which("clang++") else "aot_eager"
TRAIN_GPT = Path(__file__).resolve().parents[1] / "scripts" / "train_gpt.py"
m, K, H = 12, 20, 24  # rows per rank, model width, hidden width (split over the ranks)
# (sequence parallel, Column overlap, Row overlap) of the three blocks
BLOCKS = ((True, "fused", "fused"), (True, "sequential", "auto"), (False, "auto", "auto"))


def _recording(graphs: list, backend: str):
    """A torch.compile backend that records Dynamo's graphs and hands them to ``backend``."""
    from torch._dynamo.backends.registry import lookup_backend

    def compile_graph(gm, example_inputs):
        graphs.append(gm)
        return lookup_backend(backend)(gm, example_inputs)

    return compile_graph


class _Block(torch.nn.Module):
    """``Row(gelu(Column(x)))`` from fluxlite's layers, on rows; without sequence parallelism the
    rows are gathered first (the layers see the whole, replicated sequence) and split after."""

    def __init__(self, sp: bool, col_overlap: str, row_overlap: str) -> None:
        from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

        super().__init__()
        cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=F32, use_cpu_initialization=True)
        init = torch.nn.init.normal_  # overwritten by _load
        self.sp = sp
        self.fc1 = ColumnParallelLinear(K, H, config=cfg, init_method=init, bias=True, overlap=col_overlap)
        self.fc2 = RowParallelLinear(H, K, config=cfg, init_method=init, bias=True, input_is_parallel=True,
                                     skip_bias_add=False, overlap=row_overlap)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from fluxlite.parallel import gather_from_sequence_parallel_region, scatter_to_sequence_parallel_region

        if not self.sp:  # the replicated grad of the gathered rows: each rank keeps its slice
            x = gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False)
        y = self.fc2(F.gelu(self.fc1(x)[0]))[0]
        return y if self.sp else scatter_to_sequence_parallel_region(y)


def _global_problem(gen, W):
    """Global float32 ``(w1 [H, K], b1 [H], w2 [K, H], b2 [K])`` per block, the input and the loss weights."""
    blocks = [tuple(randn(gen, *s, dtype=F32) / s[-1] ** 0.5 for s in ((H, K), (H,), (K, H), (K,))) for _ in BLOCKS]
    return blocks, randn(gen, W * m, K, dtype=F32), randn(gen, W * m, K, dtype=F32)


def _shards(blocks, W, rank):
    n = H // W
    cols = slice(rank * n, (rank + 1) * n)
    return [(w1[cols], b1[cols], w2[:, cols], b2) for w1, b1, w2, b2 in blocks]


def _reference(blocks, x_full, c_full, W, rank):
    """float64 output rows and grads of ``sum_ranks (y_r * c_r)`` for this rank's shards. A sequence-
    parallel Row bias acts on each rank's own rows, so its grad is that rank's partial sum: one leaf
    per rank. The replicated Row bias of the block without sequence parallelism gets the whole sum."""
    params = [[t.double().requires_grad_() for t in block] for block in blocks]
    b2_leaves = [b2.detach().repeat(W, 1).requires_grad_() if sp else b2 for (sp, *_), (*_, b2) in zip(BLOCKS, params)]
    x = x_full.double().requires_grad_()
    y = x
    for (sp, *_), (w1, b1, w2, _), b2 in zip(BLOCKS, params, b2_leaves):
        y = F.gelu(y @ w1.t() + b1) @ w2.t() + (b2.repeat_interleave(m, dim=0) if sp else b2)
    (y * c_full.double()).sum().backward()
    rows = slice(rank * m, (rank + 1) * m)
    grads = [(w1.grad, b1.grad, w2.grad, b2.grad[rank] if sp else b2.grad)
             for (sp, *_), (w1, b1, w2, _), b2 in zip(BLOCKS, params, b2_leaves)]
    return y[rows].detach(), x.grad[rows], [g for shard in _shards(grads, W, rank) for g in shard]


def _load(model: torch.nn.Module, shards) -> None:
    """Copy this step's shards into the layers' parameters and clear their grads."""
    with torch.no_grad():
        for block, (w1, b1, w2, b2) in zip(model, shards):
            for p, t in zip((block.fc1.weight, block.fc1.bias, block.fc2.weight, block.fc2.bias), (w1, b1, w2, b2)):
                p.copy_(t)
                p.grad = None


def _grads(model: torch.nn.Module) -> list:
    return [p.grad for block in model for p in (block.fc1.weight, block.fc1.bias, block.fc2.weight, block.fc2.bias)]


def _layers_compiled_vs_eager(rank: int, W: int) -> None:
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(20261123)
    graphs: list = []
    models = {mode: torch.nn.Sequential(*(_Block(*b) for b in BLOCKS)) for mode in ("eager", "compiled")}
    run = {"eager": models["eager"],
           "compiled": torch.compile(models["compiled"], backend=_recording(graphs, BACKEND), fullgraph=True)}
    rows = slice(rank * m, (rank + 1) * m)
    failures: list[str] = []
    for step in range(2):  # the second step: fresh data, the same compiled graph
        blocks, x_full, c_full = _global_problem(gen, W)
        ref_y, ref_gx, ref_gparams = _reference(blocks, x_full, c_full, W, rank)
        results = {}
        for mode, model in models.items():
            _load(model, _shards(blocks, W, rank))
            x = x_full[rows].clone().requires_grad_()
            y = run[mode](x)
            (y * c_full[rows]).sum().backward()
            results[mode] = (y.detach(), x.grad, _grads(model))
        for mode, (y, gx, gparams) in results.items():
            name = f"step {step} {mode} ({BACKEND}) W={W} r={rank}"
            check(f"{name} output", y, ref_y, F32, failures)
            check(f"{name} grad x", gx, ref_gx, F32, failures)
            for i, (g, ref) in enumerate(zip(gparams, ref_gparams)):
                check(f"{name} grad of block {i // 4} param {i % 4}", g, ref, F32, failures)
        eager, compiled = results["eager"], results["compiled"]
        for what, got, want in (("output", compiled[0], eager[0]), ("grad x", compiled[1], eager[1]),
                                *((f"grad param {i}", g, e) for i, (g, e) in enumerate(zip(compiled[2], eager[2])))):
            check(f"step {step} compiled vs eager {what}", got, want.double(), F32, failures)
    assert not failures, f"{len(failures)} failing checks:\n" + "\n".join(failures[:40])
    assert len(graphs) == 1, f"expected one graph (no graph break, no recompile for new data), got {len(graphs)}"
    ops = sorted(str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function" and "fluxlite" in str(n.target))
    assert ops == ["fluxlite.ag_gemm", "fluxlite.ag_gemm", "fluxlite.gemm_rs", "fluxlite.gemm_rs"], ops


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_layers_compile_fullgraph_match_eager_and_float64(tmp_path):
    run_ranks(_layers_compiled_vs_eager, 2, timeout_s=60, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})


# ---- the training example's model ----------------------------------------------------------------

def _train_gpt():
    from tests.test_train_gpt import load_script

    return load_script(TRAIN_GPT)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """``||got - want|| / ||want||`` in float64 (inf for NaN)."""
    diff = (got.double() - want.double()).norm().item()
    return float("inf") if diff != diff else diff / max(want.double().norm().item(), 1e-30)


def gpt_compiled_vs_eager(rank: int, W: int, backend: str, args: tuple, grad_tol: float | None, loss_tol: float) -> None:
    """scripts/train_gpt.py's GPT (sequence parallel, ``args`` of its command line) compiled with
    ``fullgraph=True`` against the same model uncompiled, over two batches: the losses within
    ``loss_tol`` (relative) of each other and of the single-process ``nn.Linear`` twin's (train_gpt
    ``--check``'s, same dtype and weights), every grad within
    tests/numerics.py's fp32 tolerance of eager's (``grad_tol=None``) or within ``grad_tol`` relative
    error of its norm (bf16); one graph."""
    T = _train_gpt()
    a = T.parse_args(list(args))
    device = torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    dtype = T.DTYPES[a.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    if device.type == "cpu":
        poison_empty_tensors()
    models = {}
    for mode in ("eager", "compiled", "twin"):  # the same seed: the same master weights (train_gpt --check)
        torch.manual_seed(a.seed)
        twin = mode == "twin"  # nn.Linear on one process, in the same dtype (a float64 GPT draws other weights)
        models[mode] = T.GPT(a, parallel=not twin, tp_size=1 if twin else W, sequence_parallel=not twin,
                             dtype=dtype).to(device)
    graphs: list = []
    run = dict(models, compiled=torch.compile(models["compiled"], backend=_recording(graphs, backend), fullgraph=True))
    successors = T.make_successors(a.vocab, a.seed)
    failures: list[str] = []
    for step in range(2):
        tokens, targets = T.batch(step, a, successors, device)
        losses, grads = {}, {}
        for mode in ("eager", "compiled"):
            loss = run[mode](tokens, targets)
            loss.backward()
            losses[mode] = loss.item()
            grads[mode] = {name: p.grad for name, p in models[mode].named_parameters()}
            models[mode].zero_grad(set_to_none=True)
        with torch.no_grad():
            losses["single-process twin"] = run["twin"](tokens, targets).item()
        for mode, want in losses.items():
            if not abs(losses["compiled"] - want) <= loss_tol * max(1.0, abs(want)):
                failures.append(f"step {step} r={rank}: compiled loss {losses['compiled']:.8f} vs {mode} {want:.8f}")
        for name, want in grads["eager"].items():
            got = grads["compiled"][name]
            if grad_tol is None:
                check(f"step {step} r={rank} grad {name}", got, want.double(), F32, failures)
            elif got is None or not _rel(got, want) <= grad_tol:
                failures.append(f"step {step} r={rank} grad {name}: relative error "
                                f"{'missing' if got is None else f'{_rel(got, want):.3g}'} > {grad_tol}")
    assert not failures, f"{len(failures)} failing checks:\n" + "\n".join(failures[:40])
    assert len(graphs) == 1, f"expected one graph (no graph break, no recompile for new data), got {len(graphs)}"
    n_ops = sum("fluxlite" in str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function")
    assert n_ops == 4 * a.layers + 1, f"expected 4 fluxlite ops per block and the head's, got {n_ops} ({a.layers} blocks)"


GPT_CPU_ARGS = ("--device", "cpu", "--dtype", "fp32", "--layers", "2", "--hidden", "32", "--heads", "4", "--vocab", "64",
                "--seq", "16", "--batch", "2", "--overlap", "auto")


@pytest.mark.timeout(240)
def test_train_gpt_model_compiles_fullgraph_and_matches_eager(tmp_path):
    run_ranks(gpt_compiled_vs_eager, 2, "aot_eager", GPT_CPU_ARGS, None, 1e-5, timeout_s=60,
              env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})


# ---- Megatron's mapping functions, one by one ------------------------------------------------------

def _mappings_compiled_vs_eager(rank: int, W: int) -> None:
    from fluxlite.parallel import mappings as mp_

    cases = {
        "copy_to_tensor_model_parallel_region": mp_.copy_to_tensor_model_parallel_region,
        "reduce_from_tensor_model_parallel_region": mp_.reduce_from_tensor_model_parallel_region,
        "scatter_to_tensor_model_parallel_region": mp_.scatter_to_tensor_model_parallel_region,
        "gather_from_tensor_model_parallel_region": mp_.gather_from_tensor_model_parallel_region,
        "scatter_to_sequence_parallel_region": mp_.scatter_to_sequence_parallel_region,
        "gather_from_sequence_parallel_region": mp_.gather_from_sequence_parallel_region,
        "gather_from_sequence_parallel_region(tensor_parallel_output_grad=False)":
            lambda x: mp_.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False),
        "reduce_scatter_to_sequence_parallel_region": mp_.reduce_scatter_to_sequence_parallel_region,
    }
    gen = torch.Generator().manual_seed(20261123 + rank)
    failures: list[str] = []
    for name, fn in cases.items():
        x = randn(gen, 2 * W, 3 * W, dtype=F32)
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
        results = []
        for f in (fn, compiled):
            leaf = x.clone().requires_grad_()
            y = f(leaf)
            if not results:
                c = randn(gen, *y.shape, dtype=F32)
            (y * c).sum().backward()
            results.append((y.detach(), leaf.grad))
        (y_eager, g_eager), (y_compiled, g_compiled) = results
        check(f"{name} r={rank}: compiled output", y_compiled, y_eager.double(), F32, failures)
        check(f"{name} r={rank}: compiled grad", g_compiled, g_eager.double(), F32, failures)
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(120)
def test_mapping_functions_compile_with_eagers_grads():
    """Each mapping function compiled (Dynamo and AOTAutograd) against itself eager, forward and grad.
    On torch 2.11, built on the in-place ``dist`` collectives or returning a view of the input, several
    gave zero grads under compile, with no error; 2.13 hid both."""
    run_ranks(_mappings_compiled_vs_eager, 2, timeout_s=60)
