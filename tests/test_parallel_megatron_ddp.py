"""Megatron's training machinery with fluxlite's layers: a Megatron-core ``GPTModel`` built with
fluxlite's ColumnParallelLinear / RowParallelLinear (as in tests/test_parallel_megatron.py), wrapped in
Megatron's ``DistributedDataParallel`` (grads in its ``main_grad`` buffers), against the same model
with Megatron's own layers, from the same weights.

* CPU (CI): one training step of two micro-batches, then Megatron's ``finalize_model_grads`` (which
  all-reduces the sequence-parallel grads: the Row biases and the norms). The loss and every
  ``main_grad`` must match Megatron's layers, with ``gradient_accumulation_fusion`` (wgrad accumulated
  straight into ``main_grad``) and without. Runs with the CPU stand-ins of test_parallel_megatron.py.
* GPU (``-m gpu``, 2 GPUs): ten steps with Megatron's optimizer; the two loss curves must agree
  (fp32 and bf16, ``overlap="fused"`` and ``"auto"``), and the activation memory each model keeps
  after its forward, and its peak over forward + backward, are printed side by side; fluxlite's
  kept activations must be no more than Megatron's (1 MiB of allowance).

Megatron's own ColumnParallelLinear (the GPT output layer, in both models) refuses
``config.gradient_accumulation_fusion`` without apex, so the fusion is switched on in fluxlite's
layers after the model is built (``layer.gradient_accumulation_fusion``, which the layers read from
the config at construction, as Megatron's do).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.dist_utils import run_ranks

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.test_parallel_megatron import BF16_TOL, FP32_TOL, TINY, _build, _rel, make_batch, megatron_parallel_state  # noqa: E402

MICRO_BATCHES = 2


def _fuse_wgrad(model) -> int:
    """Switch on ``gradient_accumulation_fusion`` in fluxlite's layers of ``model``; returns how many."""
    import fluxlite.parallel as FP

    layers = [m for m in model.modules() if isinstance(m, (FP.ColumnParallelLinear, FP.RowParallelLinear))]
    for layer in layers:
        layer.gradient_accumulation_fusion = True
    return len(layers)


def _models(W, sp, glu, dtype, overlap, fusion, device, size):
    """(Megatron's layers, fluxlite's layers), each in Megatron's DDP, with the same weights."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ref = _build(W, fluxlite=False, sp=sp, glu=glu, dtype=dtype, overlap=overlap, device=device, size=size)
    flx = _build(W, fluxlite=True, sp=sp, glu=glu, dtype=dtype, overlap=overlap, device=device, size=size)
    flx.load_state_dict(ref.state_dict(), strict=True)
    if fusion:
        assert _fuse_wgrad(flx) == 4 * size["layers"]
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False)
    return [DistributedDataParallel(config=m.config, ddp_config=ddp_config, module=m) for m in (ref, flx)]


def _step(ddp, batches) -> torch.Tensor:
    """One training step's grads: micro-batches into Megatron's ``main_grad`` buffers, then
    ``finalize_model_grads``. Returns the step's loss (the mean over micro-batches)."""
    from megatron.core.distributed import finalize_model_grads

    ddp.zero_grad_buffer()
    loss = 0
    for batch in batches:
        micro = ddp(**batch).float().mean() / len(batches)
        micro.backward()
        loss = loss + micro.detach()
    finalize_model_grads([ddp])
    return loss


def _check_fusion_used(ddp, fusion: bool, what):
    import fluxlite.parallel as FP

    for name, module in ddp.module.named_modules():
        if isinstance(module, (FP.ColumnParallelLinear, FP.RowParallelLinear)):
            assert module.weight.grad is None, f"{name}: DDP left a .grad ({what})"
            assert module.weight.grad_added_to_main_grad is fusion, f"{name}: grad_added_to_main_grad ({what})"


def _check_main_grads(ref, flx, fusion: bool, tol: float, what):
    """After a step: fluxlite's weights went through the fusion (or not) and every fp32 ``main_grad``
    (reduced by Megatron's DDP and ``finalize_model_grads``) matches Megatron's."""
    _check_fusion_used(flx, fusion, what)
    ref_params = dict(ref.module.named_parameters())
    for name, p in flx.module.named_parameters():
        q = ref_params[name]
        assert p.main_grad.dtype == torch.float32, f"{name}: main_grad is {p.main_grad.dtype} ({what})"
        assert p.main_grad.abs().sum() > 0, f"{name}: main_grad is all zeros ({what})"
        err = _rel(p.main_grad, q.main_grad)
        assert err <= tol, f"main_grad of {name}: relative error {err:.2e} > {tol:.0e} vs Megatron ({what})"


def _cpu_case(rank, W, sp, glu, dtype, overlap, fusion, tol, device):
    what = dict(sp=sp, glu=glu, dtype=dtype, overlap=overlap, fusion=fusion)
    ref, flx = _models(W, sp, glu, dtype, overlap, fusion, device, TINY)
    batches = [make_batch(100 + i, device) for i in range(MICRO_BATCHES)]
    losses = [_step(ddp, batches) for ddp in (ref, flx)]
    assert _rel(losses[1], losses[0]) <= tol, f"loss {losses[1].item()} vs Megatron's {losses[0].item()} ({what})"
    _check_main_grads(ref, flx, fusion, tol, what)


def _cpu_worker(rank, W, cases):
    with megatron_parallel_state(W, on_gpu=False) as device:
        for case in cases:
            _cpu_case(rank, W, *case, device)


CPU_CASES = [  # (sequence_parallel, gated linear unit, dtype, overlap, gradient_accumulation_fusion, tolerance)
    (True, False, torch.float32, "fused", True, FP32_TOL),
    (True, True, torch.float32, "sequential", False, FP32_TOL),
    (False, False, torch.float32, "auto", True, FP32_TOL),
]


def test_megatron_ddp_step_matches_megatron_cpu():
    run_ranks(_cpu_worker, 2, CPU_CASES, timeout_s=60)


# ---- GPU: ten steps with Megatron's optimizer -----------------------------------------------------

GPU_SIZE = dict(layers=2, hidden=1024, heads=16, ffn=4096, vocab=1024, seq=1024, batch=2)
STEPS = 10
MIB = 2**20


def _allocated() -> int:
    """Bytes allocated once the GPU is idle and blocks freed while a side stream still used them
    (the fused ops' producer streams) are released: ``empty_cache`` processes their events."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated()


def _memory_of_step(ddp, batches):
    """(bytes the last micro-batch's forward keeps for its backward, peak bytes over its forward and
    backward), above what was allocated before it."""
    base = _allocated()
    torch.cuda.reset_peak_memory_stats()
    out = ddp(**batches[-1]).float().mean()
    kept = _allocated() - base
    out.backward()
    torch.cuda.synchronize()
    return kept, torch.cuda.max_memory_allocated() - base


def _gpu_case(rank, W, sp, glu, dtype, overlap, fusion, tol, device):
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    import fluxlite

    what = dict(sp=sp, glu=glu, dtype=dtype, overlap=overlap, fusion=fusion)
    models = _models(W, sp, glu, dtype, overlap, fusion, device, GPU_SIZE)
    opt_config = OptimizerConfig(optimizer="adam", lr=1e-4, weight_decay=0.01, clip_grad=1.0,
                                 bf16=dtype == torch.bfloat16, params_dtype=dtype, use_distributed_optimizer=False)
    optimizers = [get_megatron_optimizer(opt_config, [ddp]) for ddp in models]
    curves = [[], []]
    for step in range(STEPS):
        batches = [make_batch(1000 * step + i, device, GPU_SIZE) for i in range(MICRO_BATCHES)]
        for ddp, opt, curve in zip(models, optimizers, curves):
            opt.zero_grad()
            curve.append(_step(ddp, batches).item())
        if step == 0:  # the same weights so far: the grads must agree
            _check_main_grads(*models, fusion, tol, what)
        for opt in optimizers:
            ok, _, _ = opt.step()
            assert ok, f"optimizer step {step} failed ({what})"
    torch.cuda.synchronize()
    fluxlite.synchronize()
    kept, peak = zip(*(_memory_of_step(ddp, batches) for ddp in models))
    if rank == 0:
        print(f"\n{what}\n  loss Megatron: {[f'{x:.5f}' for x in curves[0]]}\n  loss fluxlite: {[f'{x:.5f}' for x in curves[1]]}"
              f"\n  activations kept after forward: Megatron {kept[0] / MIB:.1f} MiB, fluxlite {kept[1] / MIB:.1f} MiB"
              f"\n  peak over forward + backward:   Megatron {peak[0] / MIB:.1f} MiB, fluxlite {peak[1] / MIB:.1f} MiB")
    for step, (a, b) in enumerate(zip(*curves)):
        assert abs(b - a) <= tol * abs(a), f"step {step}: loss {b} vs Megatron's {a} ({what})"
    # the same tensors are kept for the backward (the Column layers keep their input rows, as Megatron's)
    assert kept[1] <= kept[0] + MIB, f"fluxlite keeps {kept[1]} B of activations, Megatron {kept[0]} B ({what})"


@contextlib.contextmanager
def _one_by_one(group=None, device=None, async_ops=False):
    """Stand-in for ``torch.distributed._coalescing_manager`` when ranks share a GPU: gloo has no
    coalesced all-reduce of CUDA tensors, so the collectives inside run one by one, synchronously
    (the sum is the same). Megatron's grad sync, not fluxlite, is what it replaces, in both models."""

    class _Done:
        def wait(self):
            return None

    yield _Done()


def _gpu_worker(rank, W, cases):
    from tests.gpu_utils import shared_gpus

    if shared_gpus():
        from megatron.core.distributed import param_and_grad_buffer

        param_and_grad_buffer._coalescing_manager = _one_by_one
    with megatron_parallel_state(W, on_gpu=True) as device:
        for case in cases:
            _gpu_case(rank, W, *case, device)


GPU_CASES = [
    (True, True, torch.float32, "auto", True, 1e-4),
    (True, False, torch.float32, "auto", False, 1e-4),
    (True, True, torch.bfloat16, "fused", True, BF16_TOL),
    (True, False, torch.bfloat16, "fused", False, BF16_TOL),
    (True, True, torch.bfloat16, "auto", True, BF16_TOL),
]


@pytest.mark.gpu
def test_megatron_ddp_training_matches_megatron_gpu():
    from tests.gpu_utils import run_gpu_ranks

    run_gpu_ranks(_gpu_worker, 2, GPU_CASES, limit_s=420)
