"""The parallel linear layers' math: one entry point per layer (:func:`column_parallel_linear`,
:func:`row_parallel_linear`), fluxlite's ops in both directions.

Shapes: inputs are ``[..., K]`` (Megatron's ``[s, b, h]``, or ``[s/tp, b, h]`` under sequence
parallelism) and are seen as rows ``[prod(...), K]``; gathering rows rank-major is gathering
``s`` rank-major, so ``[s/tp, b, h]`` on every rank gathers to ``[s, b, h]``. Weights are in the
``nn.Linear`` layout ``[out, in]``. ``W`` is the TP group's size.

Two routes, one math. Under sequence parallelism (without ``gradient_accumulation_fusion``) a layer
calls fluxlite's custom ops (:mod:`fluxlite.library`: ``fluxlite::ag_gemm``, ``ag_gemm_gathered``,
``gemm_rs``), whose registered autograd is the layer's backward: so a model built from the layers
traces under ``torch.compile(fullgraph=True)``. Every other case (no sequence parallelism, or the
weight grad accumulated into ``main_grad``) runs :class:`ColumnParallelLinearFunction` /
:class:`RowParallelLinearFunction`, whose backwards call the same functions
(:func:`fluxlite.library.linear_backward`, :func:`~fluxlite.library.row_sp_backward`,
:func:`~fluxlite.library.start_column_dgrad`), with the weight grad returned or sent to ``main_grad``.
Dynamo traces these functions too (their collectives are functional), except with ``main_grad``: that
in-place write is a side effect it refuses under ``fullgraph=True`` (without it: a graph break, then
eager).

Column (``x: [m, K]`` rows on this rank, ``weight: [N/W, K]``, ``g: [W*m, N/W]`` the output's grad):

* sequence parallel, forward: ``y = ag_gemm(x, weight, b)``, on the push path
  (``return_gathered=False``): only ``x`` is kept for the backward, as in Megatron.
* sequence parallel, backward, where the input grad's GEMM-RS runs fused (``overlap="fused"``, or
  ``auto``'s choice for it) and the weight grad is wanted, in this order::

      x̂ = all_gather(x)                  by the copy engines into the workspace (AG-GEMM's
                                          transport, AllGatherGemm.gather), while
      dW = Σ_parts gᵀ · x̂               [N/W, W*m] @ [W*m, K], a GEMM per part: this rank's rows
                                          first, then each peer's as they arrive (into main_grad,
                                          cuBLAS adding each product to the fp32 buffer in place)
      dx = gemm_rs(g, weightᵀ)            [W*m, N/W] @ [N/W, K] -> [m, K]
      db = Σ_rows g

  NCCL's all-gather would take SMs from the GEMM-RS beside it; the copy engines take none, and the
  weight grad's first part hides their transfer. Otherwise (``sequential``, ``decomposed``, an
  activation in the layer, a traced backward), Megatron's order::

      x̂ = all_gather(x)                  NCCL's, started asynchronously (for wgrad)
      dx = reduce_scatter(g · weight)     the GEMM-RS op, or, where it would run sequential, a matmul
                                          whose reduce-scatter runs while wgrad computes
      wait x̂;  dW = gᵀ · x̂
      db = Σ_rows g;  wait dx

  Keeping ``x̂`` from the forward instead (``ag_gemm_gathered``) is no faster at Llama-70B width on
  2×H200 (1% either way) and keeps ``W`` times the activation memory, so the layers keep only ``x``,
  as Megatron does.
* otherwise (Megatron's ``allreduce_dgrad``): ``y = x weightᵀ + b`` on the replicated input; backward
  ``dx = gemm_ar(g, weightᵀ)``, which overlaps the all-reduce with its own GEMM, then ``dW``; where
  the GEMM-AllReduce would run sequential, ``dx = g · weight`` all-reduced asynchronously while
  ``dW`` is computed (Megatron's order, which hides little: NCCL's kernel slows the GEMM beside it).

Row (``x: [M, K/W]``, ``weight: [N, K/W]``, ``g: [M/W, N]`` under sequence parallelism):

* sequence parallel: forward ``y = gemm_rs(x, weight, b)`` (the bias is added once, after the
  reduction); backward ``dx, ĝ = ag_gemm(g, weightᵀ, return_gathered=True)`` and ``dW = ĝᵀ · x``
  (the gathered grad serves both). ``db = Σ_rows g`` over this rank's rows only: a partial sum. The
  bias is marked ``sequence_parallel`` so that Megatron's ``finalize_model_grads`` (or
  :func:`fluxlite.parallel.allreduce_sequence_parallel_grads`) all-reduces it, as in Megatron.
* otherwise: forward ``gemm_ar(x, weight) + b`` (the all-reduce overlapped with the GEMM where
  ``overlap`` picks fused); backward is local (the grad is replicated).

Weight grads (both layers): returned as ``weight.grad``; or, with ``gradient_accumulation_fusion``,
accumulated in place into ``weight.main_grad`` (fp32, as Megatron's DDP sets it up):
``main_grad += gᵀ · x̂`` with fp32 accumulation, no apex needed. Megatron's contract for the returned
grad then holds: a dummy of the weight's shape when ``weight.grad_added_to_main_grad`` exists (set to
True, so that the DDP hook does not add it again; zeros under ``weight.zero_out_wgrad``), else None.

Ordering: every wait is on work queued before it (a collective started earlier in the same
backward); on CUDA a wait makes the current stream wait, the host goes on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .. import library
from ..group import TPGroup
from ..epilogue import activate_into
from ..library import Regather, linear_backward, row_sp_backward, start_column_dgrad


@dataclass(frozen=True)
class LinearOptions:
    """How a parallel linear layer communicates, and where its weight grad goes.

    Attributes:
        tp: the tensor-parallel group.
        sequence_parallel: rows are split over ``tp`` outside the layer (ignored when ``tp`` has one rank).
        impl: ``impl`` of fluxlite's ops (the layer's ``overlap``): ``"auto"``, ``"fused"``, ``"decomposed"``
            or ``"sequential"``.
        allreduce_dgrad: Column without sequence parallelism: all-reduce the input grad.
        gradient_accumulation_fusion: accumulate the weight grad into ``weight.main_grad``.
        activation: Column: the output's activation (:mod:`fluxlite.epilogue`), fused into the
            AG-GEMM's epilogue under sequence parallelism; its backward recomputes the
            pre-activation (:func:`fluxlite.library.activation_grad`).
    """

    tp: TPGroup
    sequence_parallel: bool
    impl: str
    allreduce_dgrad: bool = False
    gradient_accumulation_fusion: bool = False
    activation: str | None = None

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (it needs more than one rank)."""
        return self.sequence_parallel and self.tp.world_size > 1


# ---- shared pieces -------------------------------------------------------------------------------

def _rows(t: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` -> ``[rows, K]`` (a view where possible)."""
    if t.dim() < 2:
        raise ValueError(f"parallel linear layers take inputs of at least 2 dims [..., hidden], got shape {tuple(t.shape)}")
    return t.reshape(-1, t.shape[-1])


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()


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
    elif g.is_cuda and main_grad.dtype == torch.float32 and g.dtype in (torch.bfloat16, torch.float16):
        # summed by cuBLAS into the fp32 buffer in place: no fp32 product, no second pass over it
        torch.addmm(main_grad, g.t(), x, out_dtype=main_grad.dtype, out=main_grad)
    else:  # CPU, or a buffer of another dtype: the operands cast to it
        main_grad.addmm_(g.t().to(main_grad.dtype), x.to(main_grad.dtype))


def _weight_grad(weight: torch.Tensor, main_grad: torch.Tensor | None, g: torch.Tensor, x: torch.Tensor,
                 into: torch.Tensor | None = None):
    """``dW = gᵀ · x`` (``g: [rows, out]``, ``x: [rows, in]``): returned (added in place to ``into``, what
    an earlier part of the rows returned, when given), or accumulated into ``main_grad`` with
    Megatron's return value (a dummy or None; see the module docstring)."""
    if main_grad is None:
        return g.t() @ x if into is None else into.addmm_(g.t(), x)
    _accumulate(main_grad, g, x)
    if into is not None or not hasattr(weight, "grad_added_to_main_grad"):
        return into
    weight.grad_added_to_main_grad = True
    make = torch.zeros if getattr(weight, "zero_out_wgrad", False) else torch.empty
    return make(weight.shape, dtype=weight.dtype, device=weight.device)


def _start_column_dgrad(g: torch.Tensor, weight: torch.Tensor, opt: LinearOptions) -> torch.Tensor:
    """The Column input grad ``g · weight`` (``[M, N/W] @ [N/W, K]``) with its communication started
    (:func:`fluxlite.library.wait` returns it): reduce-scattered under sequence parallelism, else
    all-reduced when ``allreduce_dgrad`` (:func:`fluxlite.library.start_column_dgrad`); else local."""
    if opt.sp or opt.allreduce_dgrad:
        return start_column_dgrad(g, weight, opt.tp, opt.impl, None, None, sequence_parallel=opt.sp)
    return g @ weight


def _weight_grad_to(ctx, weight: torch.Tensor):
    """The ``weight_grad(g, x)`` of :func:`fluxlite.library.linear_backward` for a layer's backward: into
    ``main_grad`` or returned (:func:`_weight_grad`); ``None`` when the weight needs no grad."""
    return functools.partial(_weight_grad, weight, _main_grad(ctx, weight)) if ctx.needs_input_grad[1] else None


def _save(ctx, options: LinearOptions, x: torch.Tensor, weight: torch.Tensor, bias, wgrad_input: torch.Tensor) -> None:
    ctx.options, ctx.main_grad = options, _forward_main_grad(weight, options)
    ctx.has_bias, ctx.in_shape = bias is not None, x.shape
    act = options.activation is not None  # the activation's grad recomputes from the input and bias
    ctx.save_for_backward(wgrad_input if ctx.needs_input_grad[1] or act else None, weight, bias if act else None)


def _once_across_ranks(layer: str, opt: LinearOptions) -> None:
    """Refuse a backward that builds a graph (``create_graph=True``, a second derivative) over
    several ranks: the backward's all-reduce is not differentiated, so the second derivative would
    miss the other ranks' terms (at two ranks it was off by 60% against float64). The
    sequence-parallel custom ops differentiate their collectives and take it."""
    if torch.is_grad_enabled() and opt.tp.world_size > 1:
        raise NotImplementedError(
            f"fluxlite.parallel.{layer}: backward with create_graph=True (a second derivative) is not supported at "
            f"{opt.tp.world_size} ranks without sequence parallelism or with gradient_accumulation_fusion; "
            "with sequence_parallel=True and no gradient_accumulation_fusion it is")


def _input_grad(ctx, grad_x: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad_x is None else grad_x.view(ctx.in_shape)


# ---- sequence parallel: the custom ops ----------------------------------------------------------

def _column_sp(x2: torch.Tensor, weight: torch.Tensor, bias, opt: LinearOptions) -> torch.Tensor:
    """``ag_gemm(x2, weight, bias)`` on the push path: only ``x2`` is kept, gathered again in the backward."""
    return library.ag_gemm(x2, weight, bias, group=opt.tp.group, impl=opt.impl, activation=opt.activation)


def _row_sp(x: torch.Tensor, weight: torch.Tensor, bias, opt: LinearOptions) -> torch.Tensor:
    """``gemm_rs(rows of x, weight, bias)``: ``[s/W * ..., N]`` rows (:func:`_row_out` views them)."""
    lead, W = x.shape[:-1], opt.tp.world_size
    if lead[0] % W:
        raise ValueError(
            f"RowParallelLinear with sequence parallelism reduce-scatters the first (sequence) dim: "
            f"it ({lead[0]}) must be divisible by the tensor-parallel size ({W}); input shape {tuple(x.shape)}"
        )
    return library.gemm_rs(_rows(x), weight, bias, group=opt.tp.group, impl=opt.impl)


# The autograd Functions return the output rows, and the entry points view them with the input's
# leading dims: a view made inside a Function cannot be modified in place (Megatron's vocab-parallel
# cross-entropy shifts its logits in place), one made of its output can.

def _row_out(out: torch.Tensor, x: torch.Tensor, opt: LinearOptions) -> torch.Tensor:
    """The Row output rows viewed as ``[s, ..., N]`` (``s/W`` under sequence parallelism)."""
    lead = x.shape[:-1]
    if opt.sp:
        lead = (lead[0] // opt.tp.world_size, *lead[1:])
    return out.view(*lead, out.shape[-1])


def _column_out(out: torch.Tensor, x: torch.Tensor, opt: LinearOptions) -> torch.Tensor:
    """The Column output rows viewed as ``[s, ..., N/W]`` (``s`` gathered under sequence parallelism)."""
    lead = x.shape[:-1]
    if opt.sp:
        lead = (lead[0] * opt.tp.world_size, *lead[1:])
    return out.view(*lead, out.shape[-1])  # SwiGLU: half the weight's rows


# ---- the layers' entry points --------------------------------------------------------------------

def column_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias, options: LinearOptions) -> torch.Tensor:
    """The Column layer's ``x Wᵀ + b``: ``[..., K]`` -> ``[..., N/W]`` (under sequence parallelism the first
    dim gathered, ``s/W`` -> ``s``). Sequence parallel without ``gradient_accumulation_fusion``: through the
    custom op (traceable); otherwise through :class:`ColumnParallelLinearFunction`."""
    if options.sp and not options.gradient_accumulation_fusion:
        return _column_out(_column_sp(_rows(x), weight, bias, options), x, options)
    return _column_out(ColumnParallelLinearFunction.apply(x, weight, bias, options), x, options)


def row_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias, options: LinearOptions) -> torch.Tensor:
    """The Row layer's ``Σ_ranks x_r W_rᵀ + b``: ``[..., K/W]`` -> ``[..., N]`` (under sequence parallelism
    the first dim reduce-scattered, ``s`` -> ``s/W``). Routes as :func:`column_parallel_linear`."""
    if options.sp and not options.gradient_accumulation_fusion:
        return _row_out(_row_sp(x, weight, bias, options), x, options)
    return _row_out(RowParallelLinearFunction.apply(x, weight, bias, options), x, options)


class ColumnParallelLinearFunction(torch.autograd.Function):
    """``y = x Wᵀ + b`` with ``W`` split by output rows over the TP group (see the module docstring).
    :func:`column_parallel_linear` picks it; Dynamo traces it unless the weight grad goes to ``main_grad``."""

    @staticmethod
    def forward(ctx, x, weight, bias, options: LinearOptions):
        x2 = _rows(x)
        if options.sp:
            out = _column_sp(x2, weight, bias, options)
        else:
            out = _linear(x2, weight, bias)
            if options.activation is not None:
                out = activate_into(None, out, options.activation)  # in place where not gated
        _save(ctx, options, x, weight, bias, x2)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        _once_across_ranks("ColumnParallelLinear", ctx.options)
        wgrad_input, weight, bias = ctx.saved_tensors
        opt = ctx.options
        weight_grad = _weight_grad_to(ctx, weight)  # before any communication: it may raise
        g = _rows(grad_out).contiguous()
        grad_x, grad_w, grad_b = linear_backward(
            g, weight, wgrad_input,
            regather=Regather(opt.tp, opt.impl) if opt.sp else None,
            start_dgrad=(lambda g: _start_column_dgrad(g, weight, opt))
            if ctx.needs_input_grad[0] else None,
            weight_grad=weight_grad, bias_grad=ctx.has_bias and ctx.needs_input_grad[2], activation=opt.activation,
            bias=bias)
        return _input_grad(ctx, grad_x), grad_w, grad_b, None


class RowParallelLinearFunction(torch.autograd.Function):
    """``y = Σ_ranks x_r W_rᵀ + b`` with ``W`` split by input columns (see the module docstring).
    :func:`row_parallel_linear` picks it; Dynamo traces it unless the weight grad goes to ``main_grad``."""

    @staticmethod
    def forward(ctx, x, weight, bias, options: LinearOptions):
        x2 = _rows(x)
        if options.sp:
            out = _row_sp(x, weight, bias, options)
        else:  # GEMM-AllReduce: overlapped, or the matmul then the all-reduce, as options.impl picks
            out = torch.ops.fluxlite.gemm_ar(x2, weight, bias, options.tp.name, options.impl, None, None)
        _save(ctx, options, x, weight, bias, x2)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        _once_across_ranks("RowParallelLinear", ctx.options)
        x2, weight, _ = ctx.saved_tensors
        opt = ctx.options
        weight_grad = _weight_grad_to(ctx, weight)  # before any communication: it may raise
        g = _rows(grad_out).contiguous()
        need_dx, bias_grad = ctx.needs_input_grad[0], ctx.has_bias and ctx.needs_input_grad[2]
        if opt.sp:
            grads = row_sp_backward(g, weight, x2, tp=opt.tp, impl=opt.impl, timeout=None, scale=None,
                                    need_dx=need_dx, weight_grad=weight_grad, bias_grad=bias_grad)
        else:
            grads = linear_backward(g, weight, x2, regather=None, start_dgrad=(lambda g: g @ weight) if need_dx else None,
                                    weight_grad=weight_grad, bias_grad=bias_grad)
        return _input_grad(ctx, grads[0]), grads[1], grads[2], None
