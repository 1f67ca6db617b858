"""Autograd functions of the parallel linear layers: fluxlite's fused ops in both directions.

Shapes: inputs are ``[..., K]`` (Megatron's ``[s, b, h]``, or ``[s/tp, b, h]`` under sequence
parallelism) and are seen as rows ``[prod(...), K]``; gathering rows rank-major is gathering
``s`` rank-major, so ``[s/tp, b, h]`` on every rank gathers to ``[s, b, h]``. Weights are in the
``nn.Linear`` layout ``[out, in]``.

Column (weight ``[N/W, K]``, rank-local output columns):

* sequence parallel: forward ``ag_gemm(x, W, b, return_gathered=True)`` keeps the gathered input;
  backward ``dgrad = gemm_rs(g, Wᵀ)`` (``[W*m, N/W] @ [N/W, K]`` reduce-scattered to ``[m, K]``),
  ``wgrad = gᵀ · gathered``, ``bgrad = Σ_rows g``.
* otherwise (Megatron's ``allreduce_dgrad``): forward ``x Wᵀ + b`` on the replicated input; backward
  ``dgrad = g W`` all-reduced asynchronously while ``wgrad`` is computed.

Row (weight ``[N, K/W]``, rank-local input columns):

* sequence parallel: forward ``gemm_rs(x, W, b)`` (the bias is added once, after the reduction);
  backward ``dgrad, ĝ = ag_gemm(g, Wᵀ, return_gathered=True)`` and ``wgrad = ĝᵀ · x`` (the
  gathered grad is reused). ``bgrad = Σ_rows g`` over this rank's rows only: a partial sum. The bias
  is marked ``sequence_parallel`` so that Megatron's ``finalize_model_grads`` (or
  :func:`fluxlite.parallel.allreduce_sequence_parallel_grads`) all-reduces it, as in Megatron.
* otherwise: forward ``all_reduce(x Wᵀ) + b``; backward is local (the grad is replicated).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import ops
from .._sequential import all_gather_rows
from ..group import TPGroup


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


class ColumnParallelLinearFunction(torch.autograd.Function):
    """``y = x Wᵀ + b`` with ``W`` split by output rows over the TP group (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, tp: TPGroup, sequence_parallel: bool, allreduce_dgrad: bool, impl: str):
        lead = x.shape[:-1]
        x2 = _rows(x)
        W = tp.world_size
        if sequence_parallel and W > 1:
            out, gathered = ops.ag_gemm(x2.detach(), weight.detach(), _detach(bias), group=tp.group, impl=impl,
                                        return_gathered=True)
            lead = (lead[0] * W, *lead[1:])
        else:
            out, gathered = _linear(x2, weight, bias), x2
        ctx.tp, ctx.sp, ctx.impl = tp, sequence_parallel and W > 1, impl
        ctx.allreduce_dgrad = allreduce_dgrad and W > 1 and not ctx.sp
        ctx.has_bias = bias is not None
        ctx.save_for_backward(gathered if ctx.needs_input_grad[1] else None, weight)
        return out.view(*lead, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        gathered, weight = ctx.saved_tensors
        g = _rows(grad_out).contiguous()
        grad_x = grad_w = handle = None
        if ctx.needs_input_grad[0]:
            if ctx.sp:
                # [W*m, N/W] @ [N/W, K], reduce-scattered over rows -> [m, K]
                grad_x = ops.gemm_rs(g.detach(), weight.detach().t(), group=ctx.tp.group, impl=ctx.impl)
            else:
                grad_x = g @ weight
                if ctx.allreduce_dgrad:
                    handle = dist.all_reduce(grad_x, group=ctx.tp.group, async_op=True)
        if ctx.needs_input_grad[1]:
            grad_w = g.t() @ gathered
        grad_b = _bias_grad(ctx, g)
        if handle is not None:
            handle.wait()
        if grad_x is not None:
            lead = grad_out.shape[:-1]
            if ctx.sp:
                lead = (lead[0] // ctx.tp.world_size, *lead[1:])
            grad_x = grad_x.view(*lead, weight.shape[1])
        return grad_x, grad_w, grad_b, None, None, None, None


class RowParallelLinearFunction(torch.autograd.Function):
    """``y = Σ_ranks x_r W_rᵀ + b`` with ``W`` split by input columns (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, tp: TPGroup, sequence_parallel: bool, impl: str):
        lead = x.shape[:-1]
        x2 = _rows(x)
        W = tp.world_size
        sp = sequence_parallel and W > 1
        if sp:
            if lead[0] % W:
                raise ValueError(
                    f"RowParallelLinear with sequence parallelism reduce-scatters the first (sequence) dim: "
                    f"it ({lead[0]}) must be divisible by the tensor-parallel size ({W}); input shape {tuple(x.shape)}"
                )
            out = ops.gemm_rs(x2.detach(), weight.detach(), _detach(bias), group=tp.group, impl=impl)
            lead = (lead[0] // W, *lead[1:])
        else:
            out = x2 @ weight.t()
            if W > 1:
                dist.all_reduce(out, group=tp.group)
            if bias is not None:
                out += bias
        ctx.tp, ctx.sp, ctx.impl = tp, sp, impl
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x2 if ctx.needs_input_grad[1] else None, weight)
        ctx.in_lead = x.shape[:-1]
        return out.view(*lead, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight = ctx.saved_tensors
        g = _rows(grad_out).contiguous()
        grad_x = grad_w = None
        if ctx.sp:
            if ctx.needs_input_grad[0]:
                # all_gather(g) [W*m, N] @ W [N, K/W] -> [W*m, K/W]; the gathered g serves wgrad too
                grad_x, g_full = ops.ag_gemm(
                    g.detach(), weight.detach().t(), group=ctx.tp.group, impl=ctx.impl, return_gathered=True
                )
            elif ctx.needs_input_grad[1]:
                g_full = all_gather_rows(g, ctx.tp)
        else:
            g_full = g
            if ctx.needs_input_grad[0]:
                grad_x = g @ weight
        if ctx.needs_input_grad[1]:
            grad_w = g_full.t() @ x2
        grad_b = _bias_grad(ctx, g)
        if grad_x is not None:
            grad_x = grad_x.view(*ctx.in_lead, weight.shape[1])
        return grad_x, grad_w, grad_b, None, None, None
