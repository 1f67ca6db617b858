"""The real client: Megatron-core's GPTModel, built from Megatron's own local layer spec, with
fluxlite's ColumnParallelLinear / RowParallelLinear placed in linear_qkv, linear_proj, linear_fc1 and
linear_fc2, against the same model with Megatron's layers.

Checked: the TransformerConfig constructor path, that fluxlite draws the same initial weights as
Megatron (same seed), that Megatron's state_dict loads strictly, that the distributed-checkpoint
metadata (``sharded_state_dict``) is Megatron's, and that loss and every gradient agree, with
sequence parallelism on and off.

On CPU (CI) Megatron's own code needs three stand-ins, in the spawned ranks only:
``torch.cuda.current_device`` returns the CPU (Megatron allocates its gather buffers, attention
scratch and DDP grad buffers there), ``torch.cuda.current_stream`` is the CPU's (a no-op stream),
and the CUDA RNG tracker's ``fork`` is a no-op (dropout is 0). Everything else is
Megatron's code: its embedding, attention, SP mappings, its own SP linear layers for the reference
model, the output layer and the vocab-parallel cross-entropy. On GPU (``-m gpu``) nothing is
stubbed. Both models use a LayerNorm that supports sequence parallelism (the spec's torch norm
refuses SP, and apex's FusedLayerNorm is not installed).

Needs ``megatron-core`` (the ``megatron`` extra); skipped without it.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from tests.dist_utils import run_ranks

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

FP32_TOL = 1e-5  # relative (norm) error, loss and grads; CPU fp32 agrees to ~1e-7
BF16_TOL = 3e-2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def _submodules(spec):
    """A spec's submodules: a ``ModuleSpec``'s (0.16), or a ``functools.partial(MLP, submodules=...)``'s
    (the MLP spec from 0.19 on)."""
    return spec.submodules if hasattr(spec, "submodules") else spec.keywords["submodules"]


TINY = dict(layers=2, hidden=64, heads=4, ffn=128, vocab=128, seq=32, batch=2)  # a GPTModel and its batch


def _build(W, *, fluxlite: bool, sp: bool, glu: bool, dtype, overlap: str, device, size=TINY):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    import fluxlite.parallel as FP

    class SPLayerNorm(torch.nn.LayerNorm):
        """Megatron's norm contract (config, hidden_size, eps) with sequence-parallel grads marked."""

        def __init__(self, config, hidden_size, eps=1e-5, **_):
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
            for p in self.parameters():
                p.sequence_parallel = config.sequence_parallel

    cfg = TransformerConfig(
        num_layers=size["layers"], hidden_size=size["hidden"], num_attention_heads=size["heads"],
        ffn_hidden_size=size["ffn"],
        tensor_model_parallel_size=W, sequence_parallel=sp, use_cpu_initialization=True,
        params_dtype=dtype, bf16=dtype == torch.bfloat16, hidden_dropout=0.0, attention_dropout=0.0,
        add_bias_linear=not glu, gated_linear_unit=glu,
        activation_func=torch.nn.functional.silu if glu else torch.nn.functional.gelu,
    )
    spec = get_gpt_layer_local_spec()
    sm = spec.submodules
    sm.input_layernorm = sm.pre_mlp_layernorm = SPLayerNorm
    if fluxlite:
        col = ModuleSpec(module=FP.ColumnParallelLinear, params={"overlap": overlap})
        row = ModuleSpec(module=FP.RowParallelLinear, params={"overlap": overlap})
        sm.self_attention.submodules.linear_qkv = col
        sm.self_attention.submodules.linear_proj = row
        mlp = _submodules(sm.mlp)
        mlp.linear_fc1 = col
        mlp.linear_fc2 = row
    block = TransformerBlockSubmodules(layer_specs=[spec] * cfg.num_layers, layer_norm=SPLayerNorm)
    torch.manual_seed(1234)
    model = GPTModel(config=cfg, transformer_layer_spec=block, vocab_size=size["vocab"], max_sequence_length=size["seq"])
    return model.to(device=device, dtype=dtype)  # as Megatron's Float16Module does for bf16


def _case(rank, W, sp, glu, dtype, overlap, device, tol):
    import fluxlite.parallel as FP

    what = dict(sp=sp, glu=glu, dtype=dtype, overlap=overlap)
    ref = _build(W, fluxlite=False, sp=sp, glu=glu, dtype=dtype, overlap=overlap, device=device)
    flx = _build(W, fluxlite=True, sp=sp, glu=glu, dtype=dtype, overlap=overlap, device=device)
    qkv = flx.decoder.layers[0].self_attention.linear_qkv
    assert isinstance(qkv, FP.ColumnParallelLinear) and qkv.sequence_parallel == sp and qkv.overlap == overlap
    assert isinstance(flx.decoder.layers[0].mlp.linear_fc2, FP.RowParallelLinear)
    # same seed, same master weights, same partitions (incl. the GLU fc1's stride 2) as Megatron
    ref_sd, flx_sd = ref.state_dict(), flx.state_dict()
    assert ref_sd.keys() == flx_sd.keys()
    for k, v in ref_sd.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, flx_sd[k]), f"initial {k} differs from Megatron's ({what})"
    flx.load_state_dict(ref_sd, strict=True)  # and a Megatron state_dict loads as it is
    _check_sharded_state_dict(ref, flx, what)
    for name, p in flx.named_parameters():
        q = dict(ref.named_parameters())[name]
        for attr in ("tensor_model_parallel", "partition_dim", "partition_stride", "sequence_parallel"):
            assert getattr(p, attr, None) == getattr(q, attr, None), f"{name}.{attr} ({what})"

    batch = make_batch(99, device)
    losses = []
    for model in (ref, flx):
        loss = model(**batch).float().mean()
        loss.backward()
        FP.allreduce_sequence_parallel_grads(model)  # what Megatron's finalize_model_grads does under SP
        losses.append(loss.detach())
    assert _rel(losses[1], losses[0]) <= tol, f"loss {losses[1].item()} vs Megatron's {losses[0].item()} ({what})"
    ref_params = dict(ref.named_parameters())
    for name, p in flx.named_parameters():
        q = ref_params[name]
        assert p.grad is not None and q.grad is not None, f"{name} has no grad ({what})"
        err = _rel(p.grad, q.grad)
        assert err <= tol, f"grad of {name}: relative error {err:.2e} > {tol:.0e} vs Megatron ({what})"


def make_batch(seed: int, device, size=TINY) -> dict:
    """GPTModel's forward arguments: random tokens and labels ``[b, s]``, positions, a causal mask."""
    g = torch.Generator().manual_seed(seed)
    b, s, vocab = size["batch"], size["seq"], size["vocab"]
    tokens = torch.randint(vocab, (b, s), generator=g).to(device)
    labels = torch.randint(vocab, (b, s), generator=g).to(device)
    pos = torch.arange(s, device=device).unsqueeze(0).expand(b, s)
    mask = torch.ones(1, 1, s, s, dtype=torch.bool, device=device).tril().logical_not()
    return dict(input_ids=tokens, position_ids=pos, attention_mask=mask, labels=labels)


def _check_sharded_state_dict(ref, flx, what):
    """Megatron's distributed checkpoint metadata (keys, global shapes, offsets, replicas) is the same."""
    fields = ("key", "global_shape", "global_offset", "axis_fragmentations", "replica_id", "prepend_axis_num")
    a, b = ref.sharded_state_dict(), flx.sharded_state_dict()
    assert a.keys() == b.keys(), f"sharded_state_dict keys differ: {set(a) ^ set(b)} ({what})"
    for k in a:
        meta = [tuple(getattr(t, f, None) for f in fields) for t in (a[k], b[k])]
        assert type(a[k]) is type(b[k]) and meta[0] == meta[1], f"sharded {k}: {meta[1]} vs Megatron's {meta[0]} ({what})"


@contextlib.contextmanager
def megatron_parallel_state(W: int, on_gpu: bool):
    """Megatron's parallel state with TP = ``W`` on this rank (on CPU with the stand-ins of the
    module docstring); yields the device to build on."""
    warnings.filterwarnings("ignore")  # Megatron warns at import about apex / TE
    if not on_gpu:
        torch.cuda.current_device = lambda: torch.device("cpu")
        torch.cuda.current_stream = torch.cpu.current_stream  # Megatron 0.19's DDP grad sync asks for it
    from megatron.core import parallel_state, tensor_parallel

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=W)
    if on_gpu:
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    else:
        tensor_parallel.random.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    try:
        yield torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    finally:
        parallel_state.destroy_model_parallel()


def _worker(rank, W, on_gpu, cases):
    with megatron_parallel_state(W, on_gpu) as device:
        for sp, glu, dtype, overlap, tol in cases:
            _case(rank, W, sp, glu, dtype, overlap, device, tol)


CPU_CASES = [  # (sequence_parallel, gated linear unit, dtype, overlap, tolerance)
    (False, False, torch.float32, "auto", FP32_TOL),
    (False, False, torch.float32, "fused", FP32_TOL),  # the Row forward through GEMM-AllReduce's protocol
    (True, False, torch.float32, "sequential", FP32_TOL),
    (True, False, torch.float32, "fused", FP32_TOL),
    (True, True, torch.float32, "fused", FP32_TOL),
    (False, True, torch.float32, "auto", FP32_TOL),
    (True, False, torch.bfloat16, "sequential", BF16_TOL),
]


def test_gpt_model_matches_megatron_cpu():
    run_ranks(_worker, 2, False, CPU_CASES, timeout_s=60)


GPU_CASES = [
    (True, False, torch.float32, "sequential", 1e-4),
    (False, False, torch.float32, "auto", 1e-4),
    (True, True, torch.bfloat16, "sequential", BF16_TOL),
    (True, False, torch.bfloat16, "fused", BF16_TOL),
    (True, True, torch.bfloat16, "fused", BF16_TOL),
    (False, True, torch.bfloat16, "fused", BF16_TOL),  # GEMM-AllReduce in the Row forward and the Column dgrad
]


@pytest.mark.gpu
def test_gpt_model_matches_megatron_gpu():
    from tests.gpu_utils import run_gpu_ranks

    run_gpu_ranks(_worker, 2, True, GPU_CASES)
