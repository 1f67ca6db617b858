"""Public ops: AllGather-GEMM and GEMM-ReduceScatter over a tensor-parallel group.

Both are collectives: every rank of the group calls them in the same order with the same shapes.
They compute under ``torch.no_grad()``; the autograd functions in :mod:`fluxlite.parallel` call
them in both directions.

A fused call whose arguments differ from an earlier fused call's only in their data (the same
group, options and timeout; tensors of the same type, shape, strides, dtype and device) repeats
that call's decisions: its checks passed for exactly these arguments, and its implementation, plan
and workspace stand (:class:`_Repeat`). It goes straight to the fused call, so what a training
step's repeated calls cost on the host is the call's own work.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.distributed as dist

from . import _decomposed, _sequential, dispatch, epilogue, fused
from ._validate import check_impl, check_operands, check_out, check_rows_divisible, check_timeout, operands_as_used
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


def _check_call(op: str, a, weight, bias, group, impl, timeout, a_shape: str, weight_shape: str) -> TPGroup:
    """The checks both ops make first; returns the group."""
    check_impl(impl)
    check_timeout(timeout)
    tp = resolve_group(group)
    check_operands(op, tp, a, weight, bias, a_shape, weight_shape)
    return tp


def check_ag_gemm(a, weight, bias, *, group, impl, timeout, out, activation, row_scale, scale):
    """Every check of an AG-GEMM call, before any communication (the eager op and the custom op's
    fake, :mod:`fluxlite.library`, share it). Returns ``(tp, a, weight, bias, ep, out_shape)`` with
    the operands as the call uses them."""
    tp = _check_call("ag_gemm", a, weight, bias, group, impl, timeout, "[m, K]", "[N_local, K]")
    ep = epilogue.check("ag_gemm", activation=activation, row_scale=row_scale, scale=scale, rows=a.shape[0],
                        weight_rows=weight.shape[0], like=a)
    a, weight, bias = operands_as_used(a, weight, bias, gated=ep.gated)
    out_shape = (tp.world_size * a.shape[0], ep.out_features(weight.shape[0]))
    check_out("ag_gemm", out, out_shape, a)
    return tp, a, weight, bias, ep, out_shape


def check_gemm_rs(a, weight, bias, *, group, impl, timeout, out, scale):
    """Every check of a GEMM-RS call, before any communication (shared as :func:`check_ag_gemm`)."""
    tp = _check_call("gemm_rs", a, weight, bias, group, impl, timeout, "[M, K_local]", "[N, K_local]")
    ep = epilogue.check("gemm_rs", activation=None, row_scale=None, scale=scale, rows=a.shape[0],
                        weight_rows=weight.shape[0], like=a)
    check_rows_divisible("gemm_rs", a.shape[0], tp.world_size)
    a, weight, bias = operands_as_used(a, weight, bias)
    out_shape = (a.shape[0] // tp.world_size, weight.shape[0])
    check_out("gemm_rs", out, out_shape, a)
    return tp, a, weight, bias, ep, out_shape


# ---- repeated fused calls -------------------------------------------------------------------------
class _Repeat(NamedTuple):
    """What a fused call decided before it ran, kept for the calls whose :func:`_repeat_key` equals
    its own: the checked epilogue, the timeout, the fused state and plan; for ``impl="auto"``, the
    dispatch key and choice, in force while :func:`fluxlite.dispatch.remembered` still gives it."""

    state: fused.FusedState
    plan: fused.Plan
    ep: epilogue.Epilogue
    timeout_s: float
    auto: tuple[dispatch.Key, Choice] | None

    def in_force(self) -> bool:
        return self.auto is None or dispatch.remembered(self.auto[0]) is self.auto[1]


_REPEATS: dict[tuple, _Repeat] = {}
MAX_REPEATS = 1024  # distinct fused calls remembered; past this it starts again
_REPEATABLE_IMPLS = ("fused", "auto")  # an explicit sequential or decomposed call never runs fused


def _tensor_key(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (type(t), t.shape, t.stride(), t.dtype, t.get_device())


def _repeat(op: str, group, timeout, options: tuple, tensors: tuple) -> tuple[tuple | None, _Repeat | None]:
    """``(key, repeat)``: the key of a call's arguments as the checks read them (not the tensors'
    data), and the earlier fused call with that key if it is still in force. The key is ``None`` when
    an argument cannot be part of one (not a tensor, unhashable, a bad timeout): the checks then say
    what is wrong. ``options`` hold their types too, so ``True`` is not taken for ``1.0``. Only
    ``options[0]`` (the impl) ``"fused"`` or ``"auto"`` can repeat: other calls build no key, nor
    does ``auto`` unless dispatch's choice for the call is fused now (:func:`_auto_runs_fused`; a
    call that becomes fused is then not remembered: its first repeat is planned in full)."""
    if options[0] not in _REPEATABLE_IMPLS:
        return None, None
    try:
        a = tensors[0]
        if options[0] == "auto" and not _auto_runs_fused(op, group, options, a, tensors[1]):
            return None, None
        device = a.get_device()
        key = (op, dist.group.WORLD if group is None else group, resolve_timeout(timeout), type(timeout),
               torch.cuda.current_device() if device >= 0 else -1,
               *((type(o), o) for o in options), *map(_tensor_key, tensors))
        repeat = _REPEATS.get(key)
    except Exception:  # noqa: BLE001 - any malformed argument: the full checks raise the documented error
        return None, None
    return key, (repeat if repeat is not None and repeat.in_force() else None)


def _auto_runs_fused(op: str, group, options: tuple, a: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether dispatch remembers a fused choice for this ``auto`` call in its mode now (the op's
    dispatch key as :func:`_choose` forms it): only then can the call repeat a fused call's decisions.
    Dictionary look-ups; none at all while no remembered choice is fused."""
    if not dispatch.fused_remembered():
        return False
    W = (dist.group.WORLD if group is None else group).size()
    if op == "ag_gemm":
        op, rows = ("ag_gemm+gathered" if options[1] else "ag_gemm"), W * a.shape[0]
    else:
        rows = a.shape[0]
    choice = dispatch.remembered(dispatch.Key.of_size(op, W, a, weight, rows))
    return choice is not None and choice.impl == "fused"


def _remember(key: tuple | None, dispatch_key: dispatch.Key | None, choice: Choice, ep: epilogue.Epilogue,
              timeout_s: float, state: fused.FusedState, plan: fused.Plan) -> None:
    """Keep a fused call's decisions for its repeats: an explicit ``impl="fused"`` always; ``auto``
    while the choice is the one dispatch remembers (not a rule it applies afresh on every call)."""
    if key is None or (dispatch_key is not None and dispatch.remembered(dispatch_key) is not choice):
        return
    if len(_REPEATS) >= MAX_REPEATS:
        _REPEATS.clear()
    _REPEATS[key] = _Repeat(state, plan, ep, timeout_s, None if dispatch_key is None else (dispatch_key, choice))


def _choose(impl: str, op: str, tp: TPGroup, a, weight, rows: int, run, timeout_s: float
            ) -> tuple[Choice, dispatch.Key | None]:
    """``(choice, dispatch key)``: an explicit ``impl``'s choice (no key), or what dispatch picks for
    the key of ``op`` with ``rows`` output rows (``a @ weight.T`` per row: 2·K·N FLOPs per rank)."""
    if impl in dispatch.EXPLICIT:
        return dispatch.EXPLICIT[impl], None
    key = dispatch.Key.of(op, tp, a, weight, rows)
    return dispatch.choose(key, tp, a, 2.0 * rows * a.shape[1] * weight.shape[0], run, timeout_s), key


# ---- the ops --------------------------------------------------------------------------------------
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
    key, repeat = _repeat("ag_gemm", group, timeout, (impl, return_gathered, activation, scale),
                          (a, weight, bias, row_scale, out))
    if repeat is not None:
        a, weight, bias = operands_as_used(a, weight, bias, gated=repeat.ep.gated)
        with torch.no_grad():
            out, gathered = fused.ag_gemm(repeat.state, repeat.plan, a, weight, bias, timeout_s=repeat.timeout_s,
                                          out=out, keep_gathered=return_gathered, ep=repeat.ep,
                                          row_scale=None if row_scale is None else row_scale.contiguous())
        return (out, gathered) if return_gathered else out
    tp, a, weight, bias, ep, _ = check_ag_gemm(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out,
                                               activation=activation, row_scale=row_scale, scale=scale)
    W = tp.world_size
    timeout_s = resolve_timeout(timeout)
    run = functools.partial(_ag_run, tp, a, weight, bias, ep=ep, keep_gathered=return_gathered,
                            row_scale=None if row_scale is None else row_scale.contiguous(), timeout_s=timeout_s)
    choice, dispatch_key = _choose(impl, "ag_gemm+gathered" if return_gathered else "ag_gemm", tp, a, weight,
                                   W * a.shape[0], run, timeout_s)
    if choice.impl == "fused":
        _check_fused_dtype("ag_gemm", a)
    out, gathered = run(choice, out=out, remember=functools.partial(_remember, key, dispatch_key, choice, ep, timeout_s))
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
    key, repeat = _repeat("gemm_rs", group, timeout, (impl, scale), (a, weight, bias, out))
    if repeat is not None:
        a, weight, bias = operands_as_used(a, weight, bias)
        with torch.no_grad():
            return fused.gemm_rs(repeat.state, repeat.plan, a, weight, bias, timeout_s=repeat.timeout_s, out=out,
                                 ep=repeat.ep)
    a, run, choice, remember = _rs_call(a, weight, bias, group, impl, timeout, out, scale, key)
    if choice.impl == "fused":
        _check_fused_dtype("gemm_rs", a)
    return run(choice, out=out, remember=remember)


def gemm_rs_impl(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 group: dist.ProcessGroup | None = None, impl: str = "auto", timeout: float | None = None,
                 scale: float | None = None) -> str:
    """The implementation :func:`gemm_rs` runs for these arguments, without running it: ``impl`` if it
    names one, else what ``auto`` chooses, by the same step as the call (:func:`fluxlite.dispatch.choose`:
    it may agree with the peers and measure, so every rank must ask together); ``"sequential"`` where no
    communication is needed (one rank, no rows). The layers ask it before they pick the Column dgrad's
    data path (:func:`fluxlite.library.start_column_dgrad`)."""
    if _repeat("gemm_rs", group, timeout, (impl, scale), (a, weight, bias, None))[1] is not None:
        return "fused"
    a, _, choice, _ = _rs_call(a, weight, bias, group, impl, timeout, None, scale, None)
    return _impl_of(choice, resolve_group(group), a)


def _rs_call(a, weight, bias, group, impl, timeout, out, scale, key):
    """A GEMM-RS call's checked ``a``, its ``run(choice, out=, remember=)``, its :class:`Choice` and
    what keeps its decisions for repeats (:func:`_remember`)."""
    tp, a, weight, bias, ep, _ = check_gemm_rs(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out,
                                               scale=scale)
    timeout_s = resolve_timeout(timeout)
    run = functools.partial(_rs_run, tp, a, weight, bias, ep=ep, timeout_s=timeout_s)
    choice, dispatch_key = _choose(impl, "gemm_rs", tp, a, weight, a.shape[0], run, timeout_s)
    return a, run, choice, functools.partial(_remember, key, dispatch_key, choice, ep, timeout_s)


def _ag_run(tp: TPGroup, a, weight, bias, choice: Choice, *, out=None, ep, keep_gathered: bool, row_scale,
            timeout_s: float, remember=None):
    """AG-GEMM by ``choice`` on checked operands -> ``(out, gathered or None)``; a fused call hands
    its state and plan to ``remember`` (the call's own run, not a dispatch measurement's)."""
    impl = _impl_of(choice, tp, a)
    with torch.no_grad():
        if impl == "fused":
            state = fused.state_of(get_workspace(tp.group, a.device, timeout=timeout_s), timeout_s)
            plan = fused.prepare_ag_gemm(state, a, weight, timeout_s=timeout_s, keep_gathered=keep_gathered, ep=ep,
                                         config=choice.config)
            result = fused.ag_gemm(state, plan, a, weight, bias, timeout_s=timeout_s, out=out,
                                   keep_gathered=keep_gathered, ep=ep, row_scale=row_scale)
            if remember is not None:
                remember(state, plan)
            return result
        return _IMPL_MODULES[impl].ag_gemm(tp, a, weight, bias, out, ep, row_scale)


def _rs_run(tp: TPGroup, a, weight, bias, choice: Choice, *, out=None, ep, timeout_s: float,
            remember=None) -> torch.Tensor:
    """GEMM-RS by ``choice`` on checked operands -> ``[M/W, N]`` (``remember``: as :func:`_ag_run`)."""
    impl = _impl_of(choice, tp, a)
    with torch.no_grad():
        if impl == "fused":
            state = fused.state_of(get_workspace(tp.group, a.device, timeout=timeout_s), timeout_s)
            plan = fused.prepare_gemm_rs(state, a, weight, timeout_s=timeout_s, ep=ep, config=choice.config)
            result = fused.gemm_rs(state, plan, a, weight, bias, timeout_s=timeout_s, out=out, ep=ep)
            if remember is not None:
                remember(state, plan)
            return result
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
    _REPEATS.clear()  # they hold the states
    for owner in (*fused.forget_states(), *forget_workspaces()):
        try:
            owner.close(timeout)
        except BaseException as exc:  # release the rest all the same
            errors.append(exc)
    if errors:
        raise errors[0]
