"""Calls under ``torch.inference_mode()`` and outside it, in either order, on one workspace.

The workspace, the fused state and the plans outlive a call and are updated in place by later
calls. Made during a call under ``torch.inference_mode()`` they would be inference tensors, which a
later call outside it may not update ("Inplace update to inference tensor outside InferenceMode").
gloo CPU ranks, fresh processes; fp32 results against float64 (tests/numerics.py tolerances) on
fresh data each call, with NaN-filled ``out=`` tensors and every ``torch.empty`` NaN-filled.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import fluxlite

from .dist_utils import run_ranks
from .numerics import ag_reference, check, poison_empty_tensors, randn, rs_reference

F32 = torch.float32


def _call_and_check(op: str, impl: str, gen: torch.Generator, rank: int, W: int, name: str, failures: list) -> None:
    """One call of ``op`` on fresh data of odd sizes, into a NaN-filled ``out``, against float64."""
    m, K, N = 5, 24, 7
    if op == "ag_gemm":
        a_full, weight, bias = randn(gen, W * m, K, dtype=F32), randn(gen, N, K, dtype=F32), randn(gen, N, dtype=F32)
        out = torch.full((W * m, N), float("nan"))
        got = fluxlite.ag_gemm(a_full[rank * m : (rank + 1) * m], weight, bias, impl=impl, out=out)
        ref = ag_reference(a_full, weight, bias)
    else:
        a_parts = [randn(gen, W * m, K, dtype=F32) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=F32) for _ in range(W)]
        bias = randn(gen, N, dtype=F32)
        rows = m if op == "gemm_rs" else W * m
        out = torch.full((rows, N), float("nan"))
        got = getattr(fluxlite, op)(a_parts[rank], w_parts[rank], bias, impl=impl, out=out)
        if op == "gemm_rs":
            ref = rs_reference(a_parts, w_parts, bias, rank)
        else:
            ref = sum(a.double() @ w.double().t() for a, w in zip(a_parts, w_parts)) + bias.double()
    check(name, got, ref, F32, failures)
    if got is not out:
        failures.append(f"{name}: the result is not the out= tensor")


def _modes(rank: int, W: int, seed: int, first_inference: bool, workspace_first: bool) -> None:
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(seed)
    failures: list[str] = []
    order = [True, False, True] if first_inference else [False, True, False]
    if workspace_first:  # the public handle first, from inside inference mode
        with torch.inference_mode():
            fluxlite.get_workspace()
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        for impl in ("fused", "auto"):
            for step, inference in enumerate(order):
                name = f"{op} {impl} call {step} ({'inference mode' if inference else 'grad mode'})"
                try:
                    if inference:
                        with torch.inference_mode():
                            _call_and_check(op, impl, gen, rank, W, name, failures)
                    else:
                        _call_and_check(op, impl, gen, rank, W, name, failures)
                except Exception as exc:  # noqa: BLE001 - reported with the case's name
                    failures.append(f"{name}: {type(exc).__name__}: {exc}")
                    fluxlite.release_workspaces()  # the next case starts clean on every rank
    fluxlite.release_workspaces()
    gathered = [None] * W
    dist.all_gather_object(gathered, failures)
    assert not any(gathered), "\n".join(f for per_rank in gathered for f in per_rank)


@pytest.mark.parametrize("first_inference,workspace_first", [(True, False), (False, False), (True, True)],
                         ids=["inference_first", "grad_first", "workspace_in_inference"])
def test_calls_in_and_out_of_inference_mode_share_one_workspace(first_inference, workspace_first):
    """Every op, fused and ``auto``, three calls alternating between inference mode and grad mode,
    each right; the first call (which builds the workspace, state and plan) in either mode, or the
    workspace built by ``fluxlite.get_workspace()`` inside inference mode."""
    run_ranks(_modes, 2, int(torch.randint(2**31, ()).item()), first_inference, workspace_first)


def _layers(rank: int, W: int, seed: int) -> None:
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    torch.manual_seed(seed)
    init = lambda w: torch.nn.init.normal_(w, std=0.5)  # noqa: E731 - every rank draws alike
    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float64)
    col = ColumnParallelLinear(16, 8 * W, config=cfg, init_method=init, bias=True, overlap="fused")
    row = RowParallelLinear(8 * W, 16, config=cfg, init_method=init, bias=True, input_is_parallel=True,
                            skip_bias_add=False, overlap="fused")
    x = torch.randn(3 * W, 2, 16, dtype=torch.float64)
    with torch.inference_mode():  # a serving step first: builds the fused state
        served, _ = row(col(x)[0])
    y, _ = row(col(x)[0])  # then a training step on the same layers
    y.sum().backward()
    assert torch.allclose(served, y.detach(), rtol=1e-10, atol=1e-10)
    assert col.weight.grad is not None and row.weight.grad is not None
    assert torch.isfinite(col.weight.grad).all() and torch.isfinite(row.weight.grad).all()
    fluxlite.release_workspaces()


def test_a_serving_step_then_a_training_step_on_the_same_layers():
    """Column then Row layers (sequence parallel, fused) run under inference mode, then forward and
    backward outside it: the same output, finite grads."""
    run_ranks(_layers, 2, int(torch.randint(2**31, ()).item()))


def _gpu_modes(rank: int, W: int, seed: int) -> None:
    """Every op on GPU ranks, fused and ``auto``, five calls of one shape alternating between
    inference mode and grad mode (inference mode first): the first builds the plan and state, the
    second captures the eager replay's graph, the later ones replay it; each against float32."""
    from .gpu_utils import dev, rel_err

    dtype, failures = torch.bfloat16, []
    cases = [("ag_gemm", 1000, 1000, 3000), ("gemm_rs", 2 * 999, 1000, 3000),
             ("gemm_ar", 2048, 1000, 3000), ("gemm_ar", 7, 1000, 3000)]  # the last: GEMM-AllReduce's one-shot
    for op, M, K, N in cases:
        for impl in ("fused", "auto"):
            for step in range(5):
                gen = torch.Generator(device=dev()).manual_seed(seed + step)
                w_full = (torch.randn(N, W * K, generator=gen, device=dev()) / (W * K) ** 0.5).to(dtype)
                bias = torch.randn(N, generator=gen, device=dev()).to(dtype)
                name = f"{op} {impl} M={M} call {step} ({'inference mode' if step % 2 == 0 else 'grad mode'})"
                try:
                    with torch.inference_mode(step % 2 == 0):
                        if op == "ag_gemm":
                            a_full = torch.randn(W * M, K, generator=gen, device=dev()).to(dtype)
                            ref = a_full.float() @ w_full[:, :K].float().t() + bias.float()
                            out = torch.full((W * M, N), float("nan"), device=dev(), dtype=dtype)
                            fluxlite.ag_gemm(a_full[rank * M:(rank + 1) * M], w_full[:, :K].contiguous(), bias,
                                             impl=impl, out=out)
                        else:
                            a_full = torch.randn(M, W * K, generator=gen, device=dev()).to(dtype)
                            full = a_full.float() @ w_full.float().t() + bias.float()
                            rows = M // W if op == "gemm_rs" else M
                            ref = full[rank * rows:(rank + 1) * rows] if op == "gemm_rs" else full
                            out = torch.full((rows, N), float("nan"), device=dev(), dtype=dtype)
                            cols = slice(rank * K, (rank + 1) * K)
                            getattr(fluxlite, op)(a_full[:, cols].contiguous(), w_full[:, cols].contiguous(),
                                                  bias, impl=impl, out=out)
                        fluxlite.synchronize()
                    err = rel_err(out, ref)
                    if not err < 2e-2:
                        failures.append(f"{name}: rel err {err:.3g}")
                except Exception as exc:  # noqa: BLE001 - reported with the case's name
                    failures.append(f"{name}: {type(exc).__name__}: {exc}")
    fluxlite.release_workspaces()
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_gpu_calls_in_and_out_of_inference_mode_replay_alike():
    """On GPU ranks (bf16 against float32, 2e-2 norm-relative): the eager replay's graph captured under
    one mode replays under the other, for every op, fused and ``auto``."""
    from .gpu_utils import run_gpu_ranks

    run_gpu_ranks(_gpu_modes, 2, int(torch.randint(2**31, ()).item()))
