"""Public ops: AllGather-GEMM and GEMM-ReduceScatter over a tensor-parallel group.

Both are collectives: every rank of the group calls them in the same order with the same shapes.
They compute under ``torch.no_grad()``; the autograd functions in :mod:`fluxlite.parallel` call
them in both directions.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from . import _decomposed, _sequential, dispatch, epilogue, fused
from ._validate import check_impl, check_operands, check_out, check_rows_divisible, check_timeout
from .dispatch import Choice
from .flags import resolve_timeout
from .group import TPGroup, resolve_group
from .workspace import forget_workspaces, get_workspace

_GPU_FUSED_DTYPES = (torch.bfloat16, torch.float16)
_IMPL_MODULES = {"sequential": _sequential, "decomposed": _decomposed}


def _impl_of(choice: Choice, tp: TPGroup, a: torch.Tensor) -> str:
    """A world of one, or no rows, needs no communication: every impl computes locally."""
    return "sequential" if tp.world_size == 1 or a.shape[0] == 0 else choice.impl


def _check_fused_dtype(op: str, a: torch.Tensor) -> None:
    if a.device.type == "cuda" and a.dtype not in _GPU_FUSED_DTYPES:
        raise TypeError(
            f"fluxlite.{op}(impl='fused') on CUDA supports a.dtype in {_GPU_FUSED_DTYPES}, got {a.dtype}; "
            f"use impl='sequential' (or 'auto') for {a.dtype}"
        )


def _check_call(op: str, a, weight, bias, group, impl, timeout, a_shape: str, weight_shape: str):
    """The checks both ops make first: ``(tp, a, weight, bias)`` as the call uses them."""
    check_impl(impl)
    check_timeout(timeout)
    tp = resolve_group(group)
    return (tp, *check_operands(op, tp, a, weight, bias, a_shape, weight_shape))


def check_ag_gemm(a, weight, bias, *, group, impl, timeout, out, activation, row_scale, scale):
    """Every check of an AG-GEMM call, before any communication (the eager op and the custom op's
    fake, :mod:`fluxlite.library`, share it). Returns ``(tp, a, weight, bias, ep, out_shape)`` with
    the operands as the call uses them."""
    tp, a, weight, bias = _check_call("ag_gemm", a, weight, bias, group, impl, timeout, "[m, K]", "[N_local, K]")
    ep = epilogue.check("ag_gemm", activation=activation, row_scale=row_scale, scale=scale, rows=a.shape[0],
                        weight_rows=weight.shape[0], like=a)
    if ep.gated:
        weight = weight.contiguous()  # the kernels read gate and up rows of a row-major weight
    out_shape = (tp.world_size * a.shape[0], ep.out_features(weight.shape[0]))
    check_out("ag_gemm", out, out_shape, a)
    return tp, a, weight, bias, ep, out_shape


def check_gemm_rs(a, weight, bias, *, group, impl, timeout, out, scale):
    """Every check of a GEMM-RS call, before any communication (shared as :func:`check_ag_gemm`)."""
    tp, a, weight, bias = _check_call("gemm_rs", a, weight, bias, group, impl, timeout, "[M, K_local]", "[N, K_local]")
    ep = epilogue.check("gemm_rs", activation=None, row_scale=None, scale=scale, rows=a.shape[0],
                        weight_rows=weight.shape[0], like=a)
    check_rows_divisible("gemm_rs", a.shape[0], tp.world_size)
    out_shape = (a.shape[0] // tp.world_size, weight.shape[0])
    check_out("gemm_rs", out, out_shape, a)
    return tp, a, weight, bias, ep, out_shape


def ag_gemm(
    a: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    impl: str = "auto",
    return_gathered: bool = False,
    timeout: float | None = None,
    out: torch.Tensor | None = None,
    activation: str | None = None,
    row_scale: torch.Tensor | None = None,
    scale: float | None = None,
):
    """All-gather rows of ``a`` across the group, multiply by ``weight.T``, apply the epilogue:
    ``act(scale * row_scale[i] * (all_gather(a) @ weight.T)[i] + bias)`` (:mod:`fluxlite.epilogue`).

    Args:
        a: ``[m, K]``, this rank's rows.
        weight: ``[N_local, K]`` (``nn.Linear`` layout), this rank's output columns; ``[2*N_local, K]``
            (gate rows, then up rows) for ``activation="swiglu"``.
        bias: ``[weight.shape[0]]`` or ``None``.
        group: the TP group (default: the default process group).
        impl: ``"sequential"`` (collective, then matmul), ``"decomposed"`` (per-peer chunks of the
            collective overlapped with chunked matmuls), ``"fused"`` (tile protocol) or ``"auto"``
            (measured per shape: :mod:`fluxlite.dispatch`).
        return_gathered: also return the gathered input ``[W*m, K]`` (rank-major rows).
        timeout: seconds any flag wait may take (default: ``FLUXLITE_TIMEOUT_S`` or 120).
        out: optional ``[W*m, N_local]`` tensor to write the result into.
        activation: ``None``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"`` or ``"swiglu"``.
        row_scale: ``[m]`` fp32 scales of this rank's rows (gathered with them), or ``None``.
        scale: a scalar multiplier of the product, or ``None`` (1).

    Returns:
        ``[W*m, N_local]`` in ``a.dtype``, or ``(out, gathered)`` when ``return_gathered``.
    """
    tp, a, weight, bias, ep, _ = check_ag_gemm(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out,
                                               activation=activation, row_scale=row_scale, scale=scale)
    W = tp.world_size
    timeout_s = resolve_timeout(timeout)
    run = functools.partial(_ag_run, tp, a, weight, bias, ep=ep, keep_gathered=return_gathered,
                            row_scale=None if row_scale is None else row_scale.contiguous(), timeout_s=timeout_s)
    choice = dispatch.EXPLICIT.get(impl) or dispatch.choose(
        dispatch.Key.of("ag_gemm+gathered" if return_gathered else "ag_gemm", tp, a, weight, W * a.shape[0]),
        tp, a, 2.0 * W * a.shape[0] * a.shape[1] * weight.shape[0], run, timeout_s)  # per-rank FLOPs
    if choice.impl == "fused":
        _check_fused_dtype("ag_gemm", a)
    out, gathered = run(choice, out=out)
    return (out, gathered) if return_gathered else out


def gemm_rs(
    a: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    impl: str = "auto",
    timeout: float | None = None,
    out: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Multiply ``a`` by ``weight.T``, reduce-scatter the rows across the group, then
    ``scale * reduced + bias`` (once, after the reduction).

    Args:
        a: ``[M, K_local]``, this rank's slice of the reduction dim; ``M`` divisible by the group size.
        weight: ``[N, K_local]`` (``nn.Linear`` layout).
        bias: ``[N]`` or ``None``; added once, after the reduction.
        group, impl, timeout: as in :func:`ag_gemm`.
        out: optional ``[M/W, N]`` tensor to write the result into.
        scale: a scalar multiplier of the reduced product, or ``None`` (1).

    Returns:
        ``[M/W, N]`` in ``a.dtype``: rows ``[r*M/W, (r+1)*M/W)`` of the summed product.
    """
    a, run, choice = _rs_call(a, weight, bias, group, impl, timeout, out, scale)
    if choice.impl == "fused":
        _check_fused_dtype("gemm_rs", a)
    return run(choice, out=out)


def gemm_rs_impl(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 group: dist.ProcessGroup | None = None, impl: str = "auto", timeout: float | None = None,
                 scale: float | None = None) -> str:
    """The implementation :func:`gemm_rs` runs for these arguments, without running it: ``impl`` if it
    names one, else what ``auto`` chooses, by the same step as the call (:func:`fluxlite.dispatch.choose`:
    it may agree with the peers and measure, so every rank must ask together); ``"sequential"`` where no
    communication is needed (one rank, no rows). The layers ask it before they pick the Column dgrad's
    data path (:func:`fluxlite.library.start_column_dgrad`)."""
    a, _, choice = _rs_call(a, weight, bias, group, impl, timeout, None, scale)
    return _impl_of(choice, resolve_group(group), a)


def _rs_call(a, weight, bias, group, impl, timeout, out, scale):
    """A GEMM-RS call's checked ``a``, its ``run(choice, out=)`` and its :class:`Choice`."""
    tp, a, weight, bias, ep, _ = check_gemm_rs(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out,
                                               scale=scale)
    timeout_s = resolve_timeout(timeout)
    run = functools.partial(_rs_run, tp, a, weight, bias, ep=ep, timeout_s=timeout_s)
    choice = dispatch.EXPLICIT.get(impl) or dispatch.choose(
        dispatch.Key.of("gemm_rs", tp, a, weight, a.shape[0]), tp, a, 2.0 * a.shape[0] * a.shape[1] * weight.shape[0],
        run, timeout_s)
    return a, run, choice


def _ag_run(tp: TPGroup, a, weight, bias, choice: Choice, *, out=None, ep, keep_gathered: bool, row_scale,
            timeout_s: float):
    """AG-GEMM by ``choice`` on checked operands -> ``(out, gathered or None)``."""
    impl = _impl_of(choice, tp, a)
    with torch.no_grad():
        if impl == "fused":
            state = fused.state_of(get_workspace(tp.group, a.device, timeout=timeout_s), timeout_s)
            return fused.ag_gemm(state, a, weight, bias, timeout_s=timeout_s, out=out, keep_gathered=keep_gathered,
                                 ep=ep, row_scale=row_scale, config=choice.config)
        return _IMPL_MODULES[impl].ag_gemm(tp, a, weight, bias, out, ep, row_scale)


def _rs_run(tp: TPGroup, a, weight, bias, choice: Choice, *, out=None, ep, timeout_s: float) -> torch.Tensor:
    """GEMM-RS by ``choice`` on checked operands -> ``[M/W, N]``."""
    impl = _impl_of(choice, tp, a)
    with torch.no_grad():
        if impl == "fused":
            state = fused.state_of(get_workspace(tp.group, a.device, timeout=timeout_s), timeout_s)
            return fused.gemm_rs(state, a, weight, bias, timeout_s=timeout_s, out=out, ep=ep, config=choice.config)
        return _IMPL_MODULES[impl].gemm_rs(tp, a, weight, bias, out, ep)


def synchronize(group: dist.ProcessGroup | None = None) -> None:
    """Wait for this rank's fused work on ``group`` and raise any timeout a kernel recorded."""
    tp = resolve_group(group)
    for state in fused.states_of(tp.group):
        state.synchronize()


def release_workspaces(timeout: float | None = None) -> None:
    """Drop every cached workspace. Call it on every rank: before destroying the process group, and
    after any fluxlite error, to recover (the next fused call builds a fresh workspace).

    It first waits (bounded by ``timeout``) until no device work or producer thread of ours can
    still touch the buffers: the fused layer's producers stop first, then the buffers go.
    """
    errors = []
    for owner in (*fused.forget_states(), *forget_workspaces()):
        try:
            owner.close(timeout)
        except BaseException as exc:  # release the rest all the same
            errors.append(exc)
    if errors:
        raise errors[0]
