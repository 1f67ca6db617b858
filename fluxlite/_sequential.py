"""The pieces of the reference implementations (each op's ``sequential`` method, :mod:`fluxlite.ops`):
the row collectives and the GEMM with an epilogue. These are the baselines every fused path is
measured against, and what ``impl="auto"`` falls back to where fusion does not pay.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .epilogue import PLAIN, Epilogue, activate_into
from .epilogue import apply as apply_epilogue
from .group import TPGroup


# torch 2.13 renamed the tensor collectives (*_into_tensor / *_tensor -> *_single); 2.11 has only the old names.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def all_gather_rows(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """``[m, ...]`` on each rank -> ``[W*m, ...]``, rank-major."""
    if tp.world_size == 1:
        return x
    out = x.new_empty((tp.world_size * x.shape[0], *x.shape[1:]))
    _all_gather_single(out, x.contiguous(), group=tp.group)
    return out


def reduce_scatter_rows(x: torch.Tensor, tp: TPGroup, out: torch.Tensor | None = None) -> torch.Tensor:
    """``[M, ...]`` on each rank -> this rank's ``[M/W, ...]`` rows of the sum over ranks, into
    ``out`` (contiguous, ``x``'s dtype) where given."""
    if tp.world_size == 1:
        return x if out is None else out.copy_(x)
    if out is None:
        out = x.new_empty((x.shape[0] // tp.world_size, *x.shape[1:]))
    _reduce_scatter_single(out, x.contiguous(), group=tp.group)
    return out


def linear_into(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                alpha: float = 1.0) -> torch.Tensor:
    """``alpha * x @ weight.T (+ bias)``, written into ``out`` when given: one cuBLAS GEMM, the bias and
    ``alpha`` in its epilogue."""
    if out is None:
        out = x.new_empty((x.shape[0], weight.shape[0]))
    if bias is not None:
        return torch.addmm(bias, x, weight.t(), alpha=alpha, out=out)
    if alpha == 1.0:
        return torch.matmul(x, weight.t(), out=out)
    return out.addmm_(x, weight.t(), beta=0, alpha=alpha)  # beta 0: out's old contents are never read


def epilogue_linear(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    ep: Epilogue = PLAIN, row_scale: torch.Tensor | None = None) -> torch.Tensor:
    """``ep(x @ weight.T)`` (:mod:`fluxlite.epilogue`; ``row_scale: [rows]``), written into ``out``
    when given. Without a row scale, one GEMM with the scale and the bias in its epilogue
    (:func:`linear_into`), then the activation in one elementwise pass (:func:`fluxlite.epilogue.activate_into`);
    with one, the epilogue on the product in fp32. Either way the GEMM's output is rounded to
    ``x.dtype`` before the rest, unlike the kernels' accumulator."""
    if not ep.row_scaled:
        z = linear_into(None if ep.gated else out, x, weight, bias, ep.scale)
        return activate_into(out if ep.gated else None, z, ep.activation)
    y = apply_epilogue(x @ weight.t(), ep, bias, row_scale, x.dtype)
    if out is None:
        return y
    return out.copy_(y)
