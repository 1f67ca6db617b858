"""``torch.compile(fullgraph=True)`` of a model built from fluxlite's custom ops (:mod:`fluxlite.library`)
on 2 CPU ranks (gloo), forward and backward, against eager and a float64 reference.

The model is two sequence-parallel MLP blocks, ``x [m, K] -> AG-GEMM -> GELU -> GEMM-RS -> [m, K]``:
the first keeps the gathered input for its weight grad (``return_gathered=True``), the second gathers
it again in the backward. So the compiled forward holds all three ops, and the compiled backward the
GEMM-RS (AG-GEMM's dgrad), the AG-GEMM with its gathered grad (GEMM-RS's dgrad) and a functional
all-gather. ``impl="fused"``: the CPU tile protocol over the /dev/shm workspace.

Backend: inductor (a C++ compiler is needed: CI's machines have g++), with a fresh cache directory,
so the test pays one cold compile (about 20 s on 2 cores). Without a C++ compiler it uses
``aot_eager``, which still runs Dynamo, the fake implementations and AOTAutograd.

Tolerance: tests/numerics.py, fp32 (``1e-5 * (|ref| + rms(ref))``), against the float64 reference
and against eager (the same ops, uncompiled). Ranks run in deterministic mode (every ``torch.empty``
is NaN-filled).
"""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from .dist_utils import run_ranks
from .numerics import check, poison_empty_tensors, randn

F32 = torch.float32
BACKEND = "inductor" if shutil.which("g++") or shutil.which("clang++") else "aot_eager"
m, K, H = 12, 20, 24  # rows per rank, model width, hidden width (split over the ranks)


class _SPBlock(torch.nn.Module):
    """``gemm_rs(gelu(ag_gemm(x, w1, b1)), w2, b2)``: this rank's shards ``w1 [H/W, K]``, ``b1 [H/W]``,
    ``w2 [K, H/W]``; ``b2 [K]`` replicated (its grad is this rank's partial sum)."""

    def __init__(self, hidden: int, world_size: int, keep_gathered: bool) -> None:
        super().__init__()
        n = hidden // world_size
        shapes = ((n, K), (n,), (K, n), (K,))
        self.w1, self.b1, self.w2, self.b2 = (torch.nn.Parameter(torch.empty(s)) for s in shapes)
        self.keep_gathered = keep_gathered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import fluxlite.library as fl

        h = fl.ag_gemm(x, self.w1, self.b1, impl="fused", return_gathered=self.keep_gathered)
        if self.keep_gathered:
            h = h[0]
        return fl.gemm_rs(F.gelu(h), self.w2, self.b2, impl="fused")


def _global_problem(gen, W):
    """Global float32 operands of the two blocks, the input and the loss weights."""
    blocks = [tuple(randn(gen, *s, dtype=F32) / s[-1] ** 0.5 for s in ((H, K), (H,), (K, H), (K,))) for _ in range(2)]
    return blocks, randn(gen, W * m, K, dtype=F32), randn(gen, W * m, K, dtype=F32)


def _shards(blocks, W, rank):
    n = H // W
    cols = slice(rank * n, (rank + 1) * n)
    return [(w1[cols], b1[cols], w2[:, cols], b2) for w1, b1, w2, b2 in blocks]


def _reference(blocks, x_full, c_full, W, rank):
    """float64 output rows and grads of ``sum_ranks (y_r * c_r)`` for this rank's shards."""
    params = [[t.double().requires_grad_() for t in block] for block in blocks]
    b2_copies = [b2.detach().repeat(W, 1).requires_grad_() for _, _, _, b2 in params]  # each rank's own b2
    x = x_full.double().requires_grad_()
    y = x
    for (w1, b1, w2, _), b2 in zip(params, b2_copies):
        y = F.gelu(y @ w1.t() + b1) @ w2.t() + b2.repeat_interleave(m, dim=0)
    (y * c_full.double()).sum().backward()
    rows = slice(rank * m, (rank + 1) * m)
    grads = [g for (w1, b1, w2, _), b2 in zip(params, b2_copies)
             for g in (w1.grad, b1.grad, w2.grad, b2.grad[rank])]
    shards = _shards([grads[i : i + 4] for i in (0, 4)], W, rank)
    return y[rows].detach(), x.grad[rows], [g for block in shards for g in block]


def _load(model: torch.nn.Module, shards) -> None:
    """Copy this step's shards into the model's parameters and clear their grads."""
    with torch.no_grad():
        for p, t in zip(model.parameters(), (t for shard in shards for t in shard)):
            p.copy_(t)
            p.grad = None


def _compiled_vs_eager(rank: int, W: int) -> None:
    from torch._dynamo.backends.registry import lookup_backend

    poison_empty_tensors()
    gen = torch.Generator().manual_seed(20261123)
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return lookup_backend(BACKEND)(gm, example_inputs)

    rows = slice(rank * m, (rank + 1) * m)
    models = {}
    for mode in ("eager", "compiled"):
        models[mode] = torch.nn.Sequential(_SPBlock(H, W, keep_gathered=True), _SPBlock(H, W, keep_gathered=False))
    run = {"eager": models["eager"], "compiled": torch.compile(models["compiled"], backend=recording_backend,
                                                                fullgraph=True)}
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
            results[mode] = (y.detach(), x.grad, [p.grad for p in model.parameters()])
        for mode, (y, gx, gparams) in results.items():
            name = f"step {step} {mode} ({BACKEND}) W={W} r={rank}"
            check(f"{name} output", y, ref_y, F32, failures)
            check(f"{name} grad x", gx, ref_gx, F32, failures)
            for i, (g, ref) in enumerate(zip(gparams, ref_gparams)):
                check(f"{name} grad param {i}", g, ref, F32, failures)
        eager, compiled = results["eager"], results["compiled"]
        for what, got, want in (("output", compiled[0], eager[0]), ("grad x", compiled[1], eager[1]),
                                *((f"grad param {i}", g, e) for i, (g, e) in enumerate(zip(compiled[2], eager[2])))):
            check(f"step {step} compiled vs eager {what}", got, want.double(), F32, failures)
    assert not failures, f"{len(failures)} failing checks:\n" + "\n".join(failures[:40])
    assert len(graphs) == 1, f"expected one graph (no graph break, no recompile for new data), got {len(graphs)}"
    ops = sorted(str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function" and "fluxlite" in str(n.target))
    assert len(ops) == 4, f"expected 2 AG-GEMMs and 2 GEMM-RSs in the compiled graph, got {ops}"


@pytest.mark.timeout(240)
def test_compile_fullgraph_matches_eager_and_reference(tmp_path):
    run_ranks(_compiled_vs_eager, 2, timeout_s=60, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
