"""Autograd functions of the parallel linear layers: fluxlite's fused ops in both directions.

Shapes: inputs are ``[..., K]`` (Megatron's ``[s, b, h]``, or ``[s/tp, b, h]`` under sequence
parallelism) and are seen as rows ``[prod(...), K]``; gathering rows rank-major is gathering
``s`` rank-major, so ``[s/tp, b, h]`` on every rank gathers to ``[s, b, h]``. Weights are in the
``nn.Linear`` layout ``[out, in]``. ``W`` is the TP group's size.

Column (``x: [m, K]`` rows on this rank, ``weight: [N/W, K]``, ``g: [W*m, N/W]`` the output's grad):

* sequence parallel, forward: ``y = ag_gemm(x, weight, b)``, on the push path
  (``return_gathered=False``): only ``x`` is kept for the backward, as in Megatron.
* sequence parallel, backward, in this order::

      x̂ = all_gather(x)                  started asynchronously (for wgrad)
      dx = reduce_scatter(g · weight)     [W*m, N/W] @ [N/W, K] -> [m, K]: the fused GEMM-RS, or a
                                          matmul whose reduce-scatter runs while wgrad computes
      wait x̂;  dW = gᵀ · x̂               [N/W, W*m] @ [W*m, K]
      db = Σ_rows g;  wait dx

  With ``keep_gathered_input`` the forward keeps ``x̂`` from the fused op
  (``return_gathered=True``) and the backward gathers nothing: one collective fewer, ``W`` times
  the activation memory. That option exists until a GPU measurement (issue 15) picks one design;
  the other is then deleted.
* otherwise (Megatron's ``allreduce_dgrad``): ``y = x weightᵀ + b`` on the replicated input; backward
  ``dx = g · weight`` all-reduced asynchronously while ``dW`` is computed.

Row (``x: [M, K/W]``, ``weight: [N, K/W]``, ``g: [M/W, N]`` under sequence parallelism):

* sequence parallel: forward ``y = gemm_rs(x, weight, b)`` (the bias is added once, after the
  reduction); backward ``dx, ĝ = ag_gemm(g, weightᵀ, return_gathered=True)`` and ``dW = ĝᵀ · x``
  (the gathered grad serves both). ``db = Σ_rows g`` over this rank's rows only: a partial sum. The
  bias is marked ``sequence_parallel`` so that Megatron's ``finalize_model_grads`` (or
  :func:`fluxlite.parallel.allreduce_sequence_parallel_grads`) all-reduces it, as in Megatron.
* otherwise: forward ``all_reduce(x weightᵀ) + b``; backward is local (the grad is replicated).

Weight grads (both layers): returned as ``weight.grad``; or, with ``gradient_accumulation_fusion``,
accumulated in place into ``weight.main_grad`` (fp32, as Megatron's DDP sets it up):
``main_grad += gᵀ · x̂`` with fp32 accumulation, no apex needed. Megatron's contract for the returned
grad then holds: a dummy of the weight's shape when ``weight.grad_added_to_main_grad`` exists (set to
True, so that the DDP hook does not add it again; zeros under ``weight.zero_out_wgrad``), else None.

Ordering: every wait is on work queued before it (a collective started earlier in the same
backward); on CUDA ``wait()`` makes the current stream wait, the host goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import ops
from .._sequential import _all_gather_single, _reduce_scatter_single, all_gather_rows
from ..group import TPGroup


@dataclass(frozen=True)
class LinearOptions:
    """How a parallel linear layer communicates, and where its weight grad goes.

    Attributes:
        tp: the tensor-parallel group.
        sequence_parallel: rows are split over ``tp`` outside the layer (ignored when ``tp`` has one rank).
        impl: ``impl`` of fluxlite's ops (the layer's ``overlap``): ``"auto"``, ``"fused"`` or ``"sequential"``.
        allreduce_dgrad: Column without sequence parallelism: all-reduce the input grad.
        keep_gathered_input: Column with sequence parallelism: keep the gathered input for wgrad
            instead of gathering it again in the backward (see the module docstring).
        gradient_accumulation_fusion: accumulate the weight grad into ``weight.main_grad``.
    """

    tp: TPGroup
    sequence_parallel: bool
    impl: str
    allreduce_dgrad: bool = False
    keep_gathered_input: bool = False
    gradient_accumulation_fusion: bool = False

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (it needs more than one rank)."""
        return self.sequence_parallel and self.tp.world_size > 1


# ---- collectives in flight -----------------------------------------------------------------------

class _Pending:
    """A result whose collective may still be running: :meth:`wait` returns it once it is done
    (on CUDA, once the current stream is ordered after the collective)."""

    def __init__(self, result: torch.Tensor, work=None):
        self._result, self._work = result, work

    def wait(self) -> torch.Tensor:
        if self._work is not None:
            self._work.wait()
            self._work = None
        return self._result


def _all_gather_rows_async(x: torch.Tensor, tp: TPGroup) -> _Pending:
    """``[m, ...]`` -> ``[W*m, ...]`` rank-major, started now."""
    out = x.new_empty((tp.world_size * x.shape[0], *x.shape[1:]))
    return _Pending(out, _all_gather_single(out, x.contiguous(), group=tp.group, async_op=True))


def _reduce_scatter_rows_async(x: torch.Tensor, tp: TPGroup) -> _Pending:
    """``[M, ...]`` -> this rank's ``[M/W, ...]`` rows of the sum over ranks, started now."""
    out = x.new_empty((x.shape[0] // tp.world_size, *x.shape[1:]))
    return _Pending(out, _reduce_scatter_single(out, x.contiguous(), group=tp.group, async_op=True))


def _all_reduce_async(x: torch.Tensor, tp: TPGroup) -> _Pending:
    """The sum over ranks, in place in ``x``, started now."""
    return _Pending(x, dist.all_reduce(x, group=tp.group, async_op=True))


# ---- shared pieces -------------------------------------------------------------------------------

def _rows(t: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` -> ``[rows, K]`` (a view where possible)."""
    if t.dim() < 2:
        raise ValueError(f"parallel linear layers take inputs of at least 2 dims [..., hidden], got shape {tuple(t.shape)}")
    return t.reshape(-1, t.shape[-1])


def _detach(t: torch.Tensor | None) -> torch.Tensor | None:
    # The ops get plain tensors: the CPU fused path's producer thread runs with grad mode on, and an
    # in-place copy from a tensor that requires grad fails there (it then surfaces only as a timeout).
    return None if t is None else t.detach()


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()


def _bias_grad(ctx, g: torch.Tensor):
    return g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None


def _forward_main_grad(weight: torch.Tensor, options: LinearOptions) -> torch.Tensor | None:
    """Forward: ``weight.main_grad`` if the weight grad accumulates into it. Megatron remembers it in
    the forward too: a module run twice in one step (a shared output layer) accumulates into the buffer
    each forward saw."""
    return getattr(weight, "main_grad", None) if options.gradient_accumulation_fusion else None


def _main_grad(ctx, weight: torch.Tensor) -> torch.Tensor | None:
    """Backward, before any communication: the buffer the weight grad accumulates into, or None."""
    if not (ctx.options.gradient_accumulation_fusion and ctx.needs_input_grad[1]):
        return None
    main_grad = ctx.main_grad if ctx.main_grad is not None else getattr(weight, "main_grad", None)
    if main_grad is None:
        raise ValueError(
            "config.gradient_accumulation_fusion is set, so the weight grad accumulates into weight.main_grad: "
            f"expected a tensor of shape {tuple(weight.shape)} (Megatron's DistributedDataParallel sets it up), "
            "got no main_grad attribute on the weight"
        )
    if main_grad.shape != weight.shape:
        raise ValueError(f"weight.main_grad must have the weight's shape {tuple(weight.shape)}, got {tuple(main_grad.shape)}")
    return main_grad


def _accumulate(main_grad: torch.Tensor, g: torch.Tensor, x: torch.Tensor) -> None:
    """``main_grad += gᵀ · x`` with the products summed in ``main_grad``'s dtype (fp32), in place."""
    if g.dtype == main_grad.dtype:
        main_grad.addmm_(g.t(), x)
    elif g.is_cuda:  # bf16/fp16 operands, fp32 accumulator and result (cuBLAS)
        main_grad.add_(torch.mm(g.t(), x, out_dtype=main_grad.dtype))
    else:
        main_grad.addmm_(g.t().to(main_grad.dtype), x.to(main_grad.dtype))


def _weight_grad(weight: torch.Tensor, main_grad: torch.Tensor | None, g: torch.Tensor, x: torch.Tensor):
    """``dW = gᵀ · x`` (``g: [rows, out]``, ``x: [rows, in]``): returned, or accumulated into
    ``main_grad`` with Megatron's return value (a dummy or None; see the module docstring)."""
    if main_grad is None:
        return g.t() @ x
    _accumulate(main_grad, g, x)
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    weight.grad_added_to_main_grad = True
    make = torch.zeros if getattr(weight, "zero_out_wgrad", False) else torch.empty
    return make(weight.shape, dtype=weight.dtype, device=weight.device)


def _fused(impl: str, tp: TPGroup, a: torch.Tensor, flops: float) -> bool:
    """Whether fluxlite's op runs fused for ``impl`` (``"auto"`` decides by device, dtype and size)."""
    return ops._choose(impl, tp, a, flops) == "fused"


# ---- the layers' functions -----------------------------------------------------------------------

class ColumnParallelLinearFunction(torch.autograd.Function):
    """``y = x Wᵀ + b`` with ``W`` split by output rows over the TP group (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, options: LinearOptions):
        lead = x.shape[:-1]
        x2 = _rows(x)
        tp = options.tp
        if options.sp:
            result = ops.ag_gemm(x2.detach(), weight.detach(), _detach(bias), group=tp.group, impl=options.impl,
                                 return_gathered=options.keep_gathered_input)
            out, wgrad_input = result if options.keep_gathered_input else (result, x2)
            lead = (lead[0] * tp.world_size, *lead[1:])
        else:
            out, wgrad_input = _linear(x2, weight, bias), x2
        ctx.options, ctx.main_grad = options, _forward_main_grad(weight, options)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(wgrad_input if ctx.needs_input_grad[1] else None, weight)
        return out.view(*lead, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        wgrad_input, weight = ctx.saved_tensors
        opt = ctx.options
        main_grad = _main_grad(ctx, weight)
        g = _rows(grad_out).contiguous()
        need_dgrad, need_wgrad = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        regather = opt.sp and not opt.keep_gathered_input
        gathered = _all_gather_rows_async(wgrad_input, opt.tp) if need_wgrad and regather else _Pending(wgrad_input)
        dgrad = _column_dgrad(g, weight, opt) if need_dgrad else None
        grad_w = _weight_grad(weight, main_grad, g, gathered.wait()) if need_wgrad else None
        grad_b = _bias_grad(ctx, g)
        grad_x = None
        if dgrad is not None:
            lead = grad_out.shape[:-1]
            if opt.sp:
                lead = (lead[0] // opt.tp.world_size, *lead[1:])
            grad_x = dgrad.wait().view(*lead, weight.shape[1])
        return grad_x, grad_w, grad_b, None


def _column_dgrad(g: torch.Tensor, weight: torch.Tensor, opt: LinearOptions) -> _Pending:
    """The Column input grad ``g · weight`` with its communication: the fused GEMM-RS (which hides its
    reduce-scatter itself), or a matmul whose reduce-scatter / all-reduce is left running."""
    tp = opt.tp
    if opt.sp and _fused(opt.impl, tp, g, 2.0 * g.shape[0] * g.shape[1] * weight.shape[1]):
        # [W*m, N/W] @ [N/W, K], reduce-scattered over rows -> [m, K]
        return _Pending(ops.gemm_rs(g.detach(), weight.detach().t(), group=tp.group, impl=opt.impl))
    partial = g @ weight
    if opt.sp:
        return _reduce_scatter_rows_async(partial, tp)
    if opt.allreduce_dgrad and tp.world_size > 1:
        return _all_reduce_async(partial, tp)
    return _Pending(partial)


class RowParallelLinearFunction(torch.autograd.Function):
    """``y = Σ_ranks x_r W_rᵀ + b`` with ``W`` split by input columns (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, options: LinearOptions):
        lead = x.shape[:-1]
        x2 = _rows(x)
        tp = options.tp
        W = tp.world_size
        if options.sp:
            if lead[0] % W:
                raise ValueError(
                    f"RowParallelLinear with sequence parallelism reduce-scatters the first (sequence) dim: "
                    f"it ({lead[0]}) must be divisible by the tensor-parallel size ({W}); input shape {tuple(x.shape)}"
                )
            out = ops.gemm_rs(x2.detach(), weight.detach(), _detach(bias), group=tp.group, impl=options.impl)
            lead = (lead[0] // W, *lead[1:])
        else:
            out = x2 @ weight.t()
            if W > 1:
                dist.all_reduce(out, group=tp.group)
            if bias is not None:
                out += bias
        ctx.options, ctx.main_grad = options, _forward_main_grad(weight, options)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x2 if ctx.needs_input_grad[1] else None, weight)
        ctx.in_lead = x.shape[:-1]
        return out.view(*lead, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight = ctx.saved_tensors
        opt = ctx.options
        main_grad = _main_grad(ctx, weight)
        g = _rows(grad_out).contiguous()
        grad_x = grad_w = None
        if opt.sp:
            if ctx.needs_input_grad[0]:
                # all_gather(g) [W*m, N] @ W [N, K/W] -> [W*m, K/W]; the gathered g serves wgrad too
                grad_x, g_full = ops.ag_gemm(
                    g.detach(), weight.detach().t(), group=opt.tp.group, impl=opt.impl, return_gathered=True
                )
            elif ctx.needs_input_grad[1]:
                g_full = all_gather_rows(g, opt.tp)
        else:
            g_full = g
            if ctx.needs_input_grad[0]:
                grad_x = g @ weight
        if ctx.needs_input_grad[1]:
            grad_w = _weight_grad(weight, main_grad, g_full, x2)
        grad_b = _bias_grad(ctx, g)
        if grad_x is not None:
            grad_x = grad_x.view(*ctx.in_lead, weight.shape[1])
        return grad_x, grad_w, grad_b, None
