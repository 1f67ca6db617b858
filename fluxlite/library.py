"""fluxlite's ops as PyTorch custom ops, so that ``torch.compile(fullgraph=True)`` traces them with no
graph break, fake tensors propagate their shapes, and autograd differentiates them.

Ops (namespace ``fluxlite``; every output is a fresh tensor, no argument is mutated)::

    ag_gemm(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale) -> out
    ag_gemm_gathered(<the same>)                                 -> (out, gathered)
    gemm_rs(a, weight, bias, group_name, impl, timeout, scale)   -> out
    gemm_ar(a, weight, bias, group_name, impl, timeout, scale)   -> out

with ``W`` the size of the group named ``group_name`` and the epilogue of :mod:`fluxlite.epilogue`::

    ag_gemm:  a: [m, K], weight: [N_local, K], bias: [N_local]  ->  out: [W*m, N_local], gathered: [W*m, K]
              out = act(scale * row_scale * (all_gather(a) @ weight.T) + bias)
              (SwiGLU: weight [2*N_local, K], gate rows then up rows; out [W*m, N_local])
    gemm_rs:  a: [M, K_local], weight: [N, K_local], bias: [N]   ->  out: [M/W, N]
              out = scale * reduce_scatter(a @ weight.T) + bias  (bias added once, after the reduction)
    gemm_ar:  a: [M, K_local], weight: [N, K_local], bias: [N]   ->  out: [M, N] on every rank
              out = scale * all_reduce(a @ weight.T) + bias      (bias added once, after the reduction)

The real implementations are :func:`fluxlite.ag_gemm`, :func:`fluxlite.gemm_rs` and :func:`fluxlite.gemm_ar`. The fake ones run
the same input checks (:mod:`fluxlite._validate`, :func:`fluxlite.epilogue.check`) and take ``W``
from the group, so a bad call fails at trace time with the eager op's error.

Autograd: the sequence-parallel math of fluxlite's Column and Row layers (:mod:`fluxlite.parallel`
runs its sequence-parallel layers through these ops, and its other cases through the same backward
functions below), with ``g`` the output's gradient and ``s`` the scale (1 when ``None``)::

    ag_gemm:  grad_a = gemm_rs(g, weight.T, scale=s)   [W*m, N_local] @ [N_local, K], reduce-scattered -> [m, K]
              grad_w = s * g.T @ gathered    (ag_gemm_gathered: the gathered output, saved;
                                              ag_gemm: a, gathered again: by the copy engines,
                                              grad_w first, where grad_a runs fused; else by NCCL
                                              while grad_a is computed: Regather)
              grad_b = sum_rows g
    gemm_rs:  grad_a, g_all = ag_gemm_gathered(g, weight.T, scale=s)   [M, N] @ [N, K_local] -> [M, K_local]
              grad_w = s * g_all.T @ a
              grad_b = sum_rows g             (this rank's rows only: a partial sum, as in the layers)
    gemm_ar:  grad_a = s * g @ weight         (g is the same on every rank: no communication)
              grad_w = s * g.T @ a
              grad_b = sum_rows g

Where ``grad_a``'s GEMM-RS runs ``sequential`` (named, or ``auto``'s choice for the call), its matmul
runs first and its reduce-scatter stays in flight while ``grad_w`` computes (Megatron's order:
:func:`start_column_dgrad`). The backward's collectives are functional collectives
(``torch.ops._c10d_functional``), asynchronous in eager mode and traceable.

With an ``activation`` the backward first turns ``g`` into the pre-activation's grad: it recomputes
the pre-activation ``z = s * x̂ @ weight.T + b`` from the gathered input (kept, or gathered first)
and takes ``act'(z) * g`` (:func:`activation_grad`); the math above then runs on that grad. Recompute,
not save: a saved ``z`` would need a second output of the fused kernel, at ``[W*m, N_local]`` of
memory per layer. The recompute costs time in training: in a Llama-70B-width block on 2×H200 (fc1
with SwiGLU, BENCHMARKS.md) the step ran at 0.82× Megatron's with the activation fused here and at
1.03× with it applied after the layer, which keeps ``z`` (0.61 against 1.27 GiB of activations).

The gathered output of ``ag_gemm_gathered`` is not differentiable (it is an activation kept for a
backward). ``row_scale`` has no backward here (the deferred-norm layer differentiates its own): with
it, on inputs that require grad, :func:`ag_gemm` raises ``NotImplementedError`` before any
communication.

Call them through :func:`ag_gemm` and :func:`gemm_rs` below, which take a ``ProcessGroup`` like the
eager ops and pass its name.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
import torch.distributed as dist
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from . import ops
from ._sequential import all_gather_rows
from ._validate import check_impl, check_timeout
from .group import TPGroup, resolve_group
from .host_flags import resolve_timeout

# ---- the group, by name ----------------------------------------------------------------------------


def _group_of(group_name: str) -> TPGroup:
    """The TP group registered under ``group_name`` (fluxlite's errors if there is none)."""
    if not dist.is_available() or not dist.is_initialized():
        return resolve_group(None)  # raises fluxlite's "no process group" ValueError
    try:
        pg = dist.distributed_c10d._resolve_process_group(group_name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"group_name: expected the name of a live process group, got {group_name!r}") from exc
    return resolve_group(pg)


def group_name_of(group: dist.ProcessGroup | None) -> str:
    """The name the ops take for ``group`` (``None``: the default group). Traceable by Dynamo."""
    if group is None:
        if not dist.is_initialized():
            resolve_group(None)  # raises fluxlite's "no process group" ValueError
        group = dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        resolve_group(group)  # raises fluxlite's TypeError naming `group`
    return group.group_name


# ---- shapes: the eager ops' own checks, then the output shapes ----------------------------------------


def _ag_gemm_shape(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale) -> tuple[int, int]:
    return ops.AG.out_shape(ops.AG.check(a, weight, bias, group=_group_of(group_name).group, impl=impl,
                                         timeout=timeout, out=None, activation=activation, row_scale=row_scale,
                                         scale=scale))


# ---- the ops ---------------------------------------------------------------------------------------


def _run_ag_gemm(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale, keep_gathered: bool):
    tp = _group_of(group_name)
    result = ops.ag_gemm(a, weight, bias, group=tp.group, impl=impl, return_gathered=keep_gathered,
                         timeout=timeout, activation=activation, row_scale=row_scale, scale=scale)
    if not keep_gathered:
        return result
    out, gathered = result
    # With one rank the gathered input is `a` itself; a custom op's outputs never alias its inputs.
    return out, gathered.clone() if gathered.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() else gathered


@torch.library.custom_op("fluxlite::ag_gemm", mutates_args=())
def _ag_gemm_op(a: Tensor, weight: Tensor, bias: Optional[Tensor], group_name: str, impl: str,
                timeout: Optional[float], activation: Optional[str], row_scale: Optional[Tensor],
                scale: Optional[float]) -> Tensor:
    return _run_ag_gemm(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale, False)


@torch.library.custom_op("fluxlite::ag_gemm_gathered", mutates_args=())
def _ag_gemm_gathered_op(a: Tensor, weight: Tensor, bias: Optional[Tensor], group_name: str, impl: str,
                         timeout: Optional[float], activation: Optional[str], row_scale: Optional[Tensor],
                         scale: Optional[float]) -> tuple[Tensor, Tensor]:
    return _run_ag_gemm(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale, True)


@torch.library.custom_op("fluxlite::gemm_rs", mutates_args=())
def _gemm_rs_op(a: Tensor, weight: Tensor, bias: Optional[Tensor], group_name: str, impl: str,
                timeout: Optional[float], scale: Optional[float]) -> Tensor:
    tp = _group_of(group_name)
    return ops.gemm_rs(a, weight, bias, group=tp.group, impl=impl, timeout=timeout, scale=scale)


@torch.library.custom_op("fluxlite::gemm_ar", mutates_args=())
def _gemm_ar_op(a: Tensor, weight: Tensor, bias: Optional[Tensor], group_name: str, impl: str,
                timeout: Optional[float], scale: Optional[float]) -> Tensor:
    tp = _group_of(group_name)
    return ops.gemm_ar(a, weight, bias, group=tp.group, impl=impl, timeout=timeout, scale=scale)


@_ag_gemm_op.register_fake
def _(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale):
    return a.new_empty(_ag_gemm_shape(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale))


@_ag_gemm_gathered_op.register_fake
def _(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale):
    out_shape = _ag_gemm_shape(a, weight, bias, group_name, impl, timeout, activation, row_scale, scale)
    return a.new_empty(out_shape), a.new_empty((out_shape[0], a.shape[1]))


@_gemm_rs_op.register_fake
def _(a, weight, bias, group_name, impl, timeout, scale):
    return a.new_empty(ops.RS.out_shape(ops.RS.check(a, weight, bias, group=_group_of(group_name).group, impl=impl,
                                                     timeout=timeout, out=None, scale=scale)))


@_gemm_ar_op.register_fake
def _(a, weight, bias, group_name, impl, timeout, scale):
    return a.new_empty(ops.AR.out_shape(ops.AR.check(a, weight, bias, group=_group_of(group_name).group, impl=impl,
                                                     timeout=timeout, out=None, scale=scale)))


# ---- communication in flight (functional collectives: async in eager, traceable under torch.compile) ----
# They take the TPGroup, not a group name to resolve, so that Dynamo traces them inside an autograd.Function.


def start_all_gather_rows(x: Tensor, tp: TPGroup) -> Tensor:
    """Start gathering ``[m, ...]`` -> ``[W*m, ...]`` rank-major; :func:`wait` returns it. Work issued
    in between overlaps it."""
    W = tp.world_size
    if W == 1:
        return x
    if x.is_cuda and tp.gloo_serves_cuda and not _tracing(x):
        # gloo's functional all-gather of a CUDA tensor reads the device pointer on the host and
        # crashes the process (SIGSEGV in gloo's worker thread on torch 2.11; pytorch/pytorch#152645);
        # the plain collective stages through host memory. It returns when done, as gloo would anyway.
        return all_gather_rows(x, tp)
    return torch.ops._c10d_functional.all_gather_into_tensor(x.contiguous(), W, tp.name)


def start_reduce_scatter_rows(x: Tensor, tp: TPGroup) -> Tensor:
    """Start ``[M, ...]`` -> this rank's ``[M/W, ...]`` rows of the sum over ranks; :func:`wait` returns it."""
    W = tp.world_size
    return x if W == 1 else torch.ops._c10d_functional.reduce_scatter_tensor(x.contiguous(), "sum", W, tp.name)


def start_all_reduce(x: Tensor, tp: TPGroup) -> Tensor:
    """Start the sum over ranks (into a new tensor); :func:`wait` returns it."""
    return x if tp.world_size == 1 else torch.ops._c10d_functional.all_reduce(x, "sum", tp.name)


def wait(t: Tensor) -> Tensor:
    """The result of a started collective, once it is done (on CUDA: once the current stream is ordered
    after it). A tensor no collective produced comes back as it is."""
    return torch.ops._c10d_functional.wait_tensor(t)


# ---- the backward math of the layers (fluxlite.parallel uses these too) -------------------------------


def _tracing(t: Tensor) -> bool:
    """Under torch.compile (or any fake-tensor trace): nothing can be measured or run now."""
    return torch.compiler.is_compiling() or is_fake(t)


def start_column_dgrad(g: Tensor, weight: Tensor, tp: TPGroup, impl: str, timeout: Optional[float],
                       scale: Optional[float], *, sequence_parallel: bool = True) -> Tensor:
    """Start the Column input grad's sum over ranks, ``s · g · weight`` (``[M, N_local] @ [N_local, K]``):
    reduce-scattered to ``[M/W, K]`` under ``sequence_parallel``, else all-reduced to ``[M, K]``;
    :func:`wait` returns it. Where its op (GEMM-RS, or GEMM-AllReduce) would run ``sequential`` (named,
    or ``auto``'s choice for this call: :meth:`fluxlite.ops.Op.impl_of`), the matmul runs here and its
    collective is left in flight, so the caller's weight grad overlaps it (Megatron's order);
    otherwise the op runs, which overlaps the communication with its own GEMM. Under a trace ``auto``
    cannot be asked now: the op decides when it runs.

    Without sequence parallelism Megatron's order hides little: in a Llama-70B-width ``GPTModel``
    step on 2×H200 the all-reduces left beside the weight grads cost the step as much as run alone
    (NCCL's kernel slows the GEMM it shares the SMs with), where GEMM-AllReduce's own overlap took
    the step 1-1.5% shorter (BENCHMARKS.md, "The Column backward's all-reduce")."""
    op, fused, collective = ((ops.RS, torch.ops.fluxlite.gemm_rs, start_reduce_scatter_rows) if sequence_parallel
                             else (ops.AR, torch.ops.fluxlite.gemm_ar, start_all_reduce))
    outside = impl == "sequential" or (
        impl == "auto" and not _tracing(g)
        and op.impl_of(g, weight.t(), group=tp.group, impl=impl, timeout=timeout, scale=scale) == "sequential")
    if not outside:
        return fused(g, weight.t(), None, tp.name, impl, timeout, scale)
    return collective(_scaled(g @ weight, scale), tp)


class Regather(NamedTuple):
    """How a backward gathers its input rows ``[m, K]`` -> ``[W*m, K]`` again for the weight grad, for a
    layer whose input grad is ``reduce_scatter(g · weight)`` (the Column layer's, sequence parallel)
    run by ``impl``: by the copy engines into the workspace where that GEMM-RS runs fused
    (:meth:`in_workspace`), else by NCCL's all-gather (gloo's on CPU), started first and left in
    flight. On the copy engines' path the weight grad comes in parts, one per arriving chunk of
    rows, so ``weight_grad`` must accept ``into`` (see :func:`linear_backward`)."""

    tp: TPGroup
    impl: str = "sequential"
    timeout: Optional[float] = None
    scale: Optional[float] = None

    def in_workspace(self, g: Tensor, weight: Tensor) -> bool:
        """Whether the rows go by AG-GEMM's push transport (:meth:`fluxlite.ops.ag_gemm.AllGatherGemm.gather`)
        for a backward with the output's grad ``g: [W*m, N_local]`` (after any activation's grad):
        where the input grad runs as the fused GEMM-RS (named, or ``auto``'s choice), outside a trace.
        There NCCL's all-gather kernel, started first, would run on some 20 SMs beside the GEMM-RS's
        first GEMM and stretch it; the copy engines take no SM, and the weight grad's first part
        (this rank's rows) hides their transfer: the Llama-70B MLP block's step 0.2-0.4 ms shorter
        on 2×H200 (BENCHMARKS.md, "The Column backward's input by the copy engines"). The rows then land
        in the group's workspace and must be read before the next fused call is enqueued."""
        return self.impl in ("fused", "auto") and not _tracing(g) and ops.RS.impl_of(
            g, weight.t(), group=self.tp.group, impl=self.impl, timeout=self.timeout, scale=self.scale) == "fused"


WeightGrad = Callable[..., Optional[Tensor]]
"""``weight_grad(g, x, into=None)``: the weight grad ``gᵀ · x`` (``g: [rows, out]``, ``x: [rows, in]``),
returned; or accumulated elsewhere (the layers' ``main_grad``) and ``None`` or a placeholder returned.
``into``: what it returned for an earlier part of the rows, to which this part is added in place
(returned again)."""


def linear_backward(g: Tensor, weight: Tensor, x: Tensor, *, regather: Optional[Regather], start_dgrad,
                    weight_grad: Optional[WeightGrad], bias_grad: bool, activation: Optional[str] = None,
                    bias: Optional[Tensor] = None, scale: Optional[float] = None):
    """The backward of ``y = act(s · x̂ · weightᵀ + b)`` (``act``: ``activation``, identity when None;
    ``s``: ``scale``, 1 when None; ``x̂``: ``x`` gathered again by ``regather``, or ``x`` itself when it
    is None) with its communication in flight while the weight grad computes, in this order::

        x̂ = all_gather(x)        started first, when ``regather`` and the weight grad (or the
                                 activation's) needs it
        g = act'(z) · g           with an activation: x̂ waited for, z = s · x̂ · weightᵀ + bias
                                 recomputed (activation_grad)
        dx = start_dgrad(g)      started (a started collective, or a tensor), when it is not None
        dW = weight_grad(g, x̂)   when it is not None, after waiting for x̂
        db = Σ_rows g            when ``bias_grad``
        wait dx

    Where the rows go by the copy engines (:meth:`Regather.in_workspace`; without an activation, whose
    grad needs them before the input grad's GEMM is known) the weight grad comes first, in parts as
    the rows arrive in the workspace (:meth:`fluxlite.ops.ag_gemm.AllGatherGemm.gather`): this rank's
    rows while the peers' travel, then each peer's. It must: the input grad's fused call would hand
    the workspace to the peers' next call.

    Returns ``(dx, dW, db)`` with ``None`` for what was not asked for."""
    dw = gathered = None  # gathered: x̂ on its way (a started collective)
    in_workspace = (regather is not None and weight_grad is not None and activation is None
                    and regather.in_workspace(g, weight))
    if in_workspace:

        def arrived(rows: slice, src: Tensor) -> None:
            nonlocal dw
            dw = weight_grad(g[rows], src, dw)

        ops.AG.gather(x, regather.tp, resolve_timeout(regather.timeout), arrived)
    elif regather is not None and (weight_grad is not None or activation is not None):
        gathered = start_all_gather_rows(x, regather.tp)
    if activation is not None:
        x, gathered = (x if gathered is None else wait(gathered)), None
        g = activation_grad(g, x, weight, bias, activation, scale)
    dx = start_dgrad(g) if start_dgrad is not None else None
    if not in_workspace and weight_grad is not None:
        dw = weight_grad(g, x if gathered is None else wait(gathered))
    db = g.sum(0) if bias_grad else None
    return (None if dx is None else wait(dx)), dw, db


def row_sp_backward(g: Tensor, weight: Tensor, a: Tensor, *, tp: TPGroup, impl: str, timeout: Optional[float],
                    scale: Optional[float], need_dx: bool, weight_grad: Optional[WeightGrad], bias_grad: bool):
    """The backward of ``y = gemm_rs(a, weight) + b`` (``g: [M/W, N]``): ``dx, ĝ = ag_gemm(g, weightᵀ)`` with
    the gathered grad ``ĝ`` kept for ``dW = weight_grad(ĝ, a)`` (gathered alone when no ``dx`` is asked
    for); ``db = Σ_rows g``, this rank's rows only (a partial sum). Returns ``(dx, dW, db)``."""
    dx = None
    if need_dx:
        # all_gather(g) [M, N] @ weight [N, K_local] -> [M, K_local]; the gathered g serves wgrad too
        dx, g_all = torch.ops.fluxlite.ag_gemm_gathered(g, weight.t(), None, tp.name, impl, timeout, None, None, scale)
    elif weight_grad is not None:
        g_all = wait(start_all_gather_rows(g, tp))
    dw = None if weight_grad is None else weight_grad(g_all, a)
    return dx, dw, (g.sum(0) if bias_grad else None)


# ---- autograd of the ops ------------------------------------------------------------------------------


def _check_differentiable(op: str, row_scale: Optional[Tensor]) -> None:
    """Raise ``NotImplementedError`` for a row scale on inputs that require grad (no backward here)."""
    if row_scale is not None:
        raise NotImplementedError(
            f"fluxlite::{op}: row_scale has no backward here (got a row_scale on inputs that require grad); "
            f"apply it outside the op, use fluxlite.parallel.LayerNormColumnParallelLinear, or call the op "
            f"under torch.no_grad()")


def activation_grad(g: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], activation: str,
                    scale: Optional[float]) -> Tensor:
    """The grad of the pre-activation ``z = scale * x @ weight.T + bias`` for ``y = act(z)`` with
    ``y``'s grad ``g``: ``act'(z) * g``, with ``z`` recomputed here.

    ``x: [rows, K]`` (the gathered input), ``weight: [N, K]`` (``[2N', K]`` for SwiGLU),
    ``g: [rows, N]`` (``[rows, N']``) -> ``[rows, N]`` in ``g.dtype``; the activation's derivative is
    taken in fp32 (fp64 for fp64) by autograd on :func:`fluxlite.epilogue.apply`, the forward's own
    reference.
    """
    from .epilogue import Epilogue
    from .epilogue import apply as apply_epilogue

    dtype = torch.promote_types(g.dtype, torch.float32)  # fp32, or fp64 for fp64
    z = _scaled((x @ weight.t()).to(dtype), scale)
    if bias is not None:
        z = z + bias.to(dtype)
    with torch.enable_grad():
        z = z.detach().requires_grad_()
        y = apply_epilogue(z, Epilogue(activation), None, None, dtype)
        (grad_z,) = torch.autograd.grad(y, z, g.to(dtype))
    return grad_z.to(g.dtype)


def _scaled(t: Tensor, scale: Optional[float]) -> Tensor:
    return t if scale is None else t * scale


def _plain_weight_grad(scale: Optional[float]) -> WeightGrad:
    def weight_grad(g: Tensor, x: Tensor, into: Optional[Tensor] = None) -> Tensor:
        if into is None:
            return _scaled(g.t() @ x, scale)
        return into.addmm_(g.t(), x, alpha=1 if scale is None else scale)
    return weight_grad


def _setup_ag_gemm(ctx, inputs, output) -> None:
    a, weight, bias, group_name, impl, timeout, activation, row_scale, scale = inputs
    _check_differentiable("ag_gemm", row_scale)
    ctx.group_name, ctx.impl, ctx.timeout, ctx.scale = group_name, impl, timeout, scale
    ctx.has_bias, ctx.activation = bias is not None, activation
    if isinstance(output, tuple):  # ag_gemm_gathered: the gathered input is an activation, kept
        ctx.mark_non_differentiable(output[1])
        kept, ctx.regather = output[1], False
    else:  # ag_gemm: keep this rank's rows only; the backward gathers them again
        kept, ctx.regather = a, True
    keep = ctx.needs_input_grad[1] or activation is not None  # the activation's grad recomputes from it
    ctx.save_for_backward(kept if keep else None, weight, bias if activation is not None else None)


def _backward_ag_gemm(ctx, grad_out: Tensor, grad_gathered: Optional[Tensor] = None):
    """``g: [W*m, N_local]`` -> grads of ``(a [m, K], weight [N_local, K], bias [N_local])``."""
    kept, weight, bias = ctx.saved_tensors
    tp = _group_of(ctx.group_name)
    g = grad_out.contiguous()
    dgrad = ((lambda g: start_column_dgrad(g, weight, tp, ctx.impl, ctx.timeout, ctx.scale))
             if ctx.needs_input_grad[0] else None)
    regather = Regather(tp, ctx.impl, ctx.timeout, ctx.scale) if ctx.regather else None
    grads = linear_backward(g, weight, kept, regather=regather, start_dgrad=dgrad,
                            weight_grad=_plain_weight_grad(ctx.scale) if ctx.needs_input_grad[1] else None,
                            bias_grad=ctx.has_bias and ctx.needs_input_grad[2], activation=ctx.activation, bias=bias,
                            scale=ctx.scale)
    return *grads, None, None, None, None, None, None


def _setup_gemm_rs(ctx, inputs, output) -> None:
    a, weight, bias, group_name, impl, timeout, scale = inputs
    ctx.group_name, ctx.impl, ctx.timeout, ctx.scale = group_name, impl, timeout, scale
    ctx.has_bias = bias is not None
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, weight)


def _backward_gemm_rs(ctx, grad_out: Tensor):
    """``g: [M/W, N]`` -> grads of ``(a [M, K_local], weight [N, K_local], bias [N])``."""
    a, weight = ctx.saved_tensors
    grads = row_sp_backward(grad_out.contiguous(), weight, a, tp=_group_of(ctx.group_name), impl=ctx.impl,
                            timeout=ctx.timeout, scale=ctx.scale, need_dx=ctx.needs_input_grad[0],
                            weight_grad=_plain_weight_grad(ctx.scale) if ctx.needs_input_grad[1] else None,
                            bias_grad=ctx.has_bias and ctx.needs_input_grad[2])
    return *grads, None, None, None, None


def _backward_gemm_ar(ctx, grad_out: Tensor):
    """``g: [M, N]`` (the same on every rank) -> grads of ``(a [M, K_local], weight [N, K_local], bias [N])``."""
    a, weight = ctx.saved_tensors
    g = grad_out.contiguous()
    grads = linear_backward(g, weight, a, regather=None,
                            start_dgrad=(lambda g: _scaled(g @ weight, ctx.scale)) if ctx.needs_input_grad[0] else None,
                            weight_grad=_plain_weight_grad(ctx.scale) if ctx.needs_input_grad[1] else None,
                            bias_grad=ctx.has_bias and ctx.needs_input_grad[2])
    return *grads, None, None, None, None


_ag_gemm_op.register_autograd(_backward_ag_gemm, setup_context=_setup_ag_gemm)
_gemm_ar_op.register_autograd(_backward_gemm_ar, setup_context=_setup_gemm_rs)
_ag_gemm_gathered_op.register_autograd(_backward_ag_gemm, setup_context=_setup_ag_gemm)
_gemm_rs_op.register_autograd(_backward_gemm_rs, setup_context=_setup_gemm_rs)


# ---- the public surface ----------------------------------------------------------------------------


def _check_attributes(impl, timeout) -> Optional[float]:
    """The plain attributes, checked before the dispatcher sees them (its type errors are less clear)."""
    check_impl(impl)
    check_timeout(timeout)
    return None if timeout is None else float(timeout)


def ag_gemm(a: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, group: dist.ProcessGroup | None = None,
            impl: str = "auto", return_gathered: bool = False, timeout: float | None = None,
            activation: str | None = None, row_scale: Tensor | None = None, scale: float | None = None):
    """:func:`fluxlite.ag_gemm` as a differentiable, traceable custom op (no ``out=``: outputs are fresh).

    ``a: [m, K]``, ``weight: [N_local, K]``, ``bias: [N_local]`` -> ``out: [W*m, N_local]``, or
    ``(out, gathered [W*m, K])`` with ``return_gathered`` (the gathered input is not differentiable;
    the backward then reuses it for the weight grad instead of gathering ``a`` again).
    """
    timeout = _check_attributes(impl, timeout)
    if torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in (a, weight, bias)):
        _check_differentiable("ag_gemm", row_scale)  # before any communication
    op = torch.ops.fluxlite.ag_gemm_gathered if return_gathered else torch.ops.fluxlite.ag_gemm
    return op(a, weight, bias, group_name_of(group), impl, timeout, activation, row_scale, scale)


def gemm_rs(a: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, group: dist.ProcessGroup | None = None,
            impl: str = "auto", timeout: float | None = None, scale: float | None = None) -> Tensor:
    """:func:`fluxlite.gemm_rs` as a differentiable, traceable custom op (no ``out=``: the output is fresh).

    ``a: [M, K_local]``, ``weight: [N, K_local]``, ``bias: [N]`` -> ``[M/W, N]``.
    """
    timeout = _check_attributes(impl, timeout)
    return torch.ops.fluxlite.gemm_rs(a, weight, bias, group_name_of(group), impl, timeout, scale)


def gemm_ar(a: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, group: dist.ProcessGroup | None = None,
            impl: str = "auto", timeout: float | None = None, scale: float | None = None) -> Tensor:
    """:func:`fluxlite.gemm_ar` as a differentiable, traceable custom op (no ``out=``: the output is fresh).

    ``a: [M, K_local]``, ``weight: [N, K_local]``, ``bias: [N]`` -> ``[M, N]`` on every rank.

    The backward takes the output's gradient to be the same on every rank, as it is where the output
    feeds replicated computation (Megatron's convention for the all-reduce of a Row layer's forward):
    it communicates nothing, and each rank's grads are those of its own loss.
    """
    timeout = _check_attributes(impl, timeout)
    return torch.ops.fluxlite.gemm_ar(a, weight, bias, group_name_of(group), impl, timeout, scale)
