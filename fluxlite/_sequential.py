"""The reference implementations: one collective, then one matmul (or the other way round).

These are the baselines every fused path is measured against, and what ``impl="auto"`` falls back
to where fusion does not pay.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .epilogue import PLAIN, Epilogue
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


def reduce_scatter_rows(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """``[M, ...]`` on each rank -> this rank's ``[M/W, ...]`` rows of the sum over ranks."""
    if tp.world_size == 1:
        return x
    out = x.new_empty((x.shape[0] // tp.world_size, *x.shape[1:]))
    _reduce_scatter_single(out, x.contiguous(), group=tp.group)
    return out


def linear_into(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T (+ bias)``, written into ``out`` when given."""
    if out is None:
        out = x.new_empty((x.shape[0], weight.shape[0]))
    if bias is not None:
        return torch.addmm(bias, x, weight.t(), out=out)
    return torch.matmul(x, weight.t(), out=out)


def epilogue_linear(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    ep: Epilogue = PLAIN, row_scale: torch.Tensor | None = None) -> torch.Tensor:
    """``ep(x @ weight.T)`` (:mod:`fluxlite.epilogue`; ``row_scale: [rows]``), written into ``out``
    when given. A plain epilogue is one ``addmm``; any other applies the epilogue to the product in
    fp32 (the product itself is rounded to ``x.dtype`` first, unlike the kernels' accumulator)."""
    if ep == PLAIN:
        return linear_into(out, x, weight, bias)
    y = apply_epilogue(x @ weight.t(), ep, bias, row_scale, x.dtype)
    if out is None:
        return y
    return out.copy_(y)


def ag_gemm(tp: TPGroup, a, weight, bias, out=None, ep: Epilogue = PLAIN, row_scale=None):
    """``(ep(all_gather(a) @ weight.T), all_gather(a))``; ``a: [m, K]``, ``weight: [N_local, K]``,
    ``row_scale: [m]`` (gathered with the rows)."""
    gathered = all_gather_rows(a, tp)
    scales = None if row_scale is None else all_gather_rows(row_scale, tp)
    return epilogue_linear(out, gathered, weight, bias, ep, scales), gathered


def gemm_rs(tp: TPGroup, a, weight, bias, out=None, ep: Epilogue = PLAIN):
    """``ep(reduce_scatter(a @ weight.T))``; ``a: [M, K_local]``, ``weight: [N, K_local]``; the bias
    (and ``ep.scale``) apply once, after the reduction."""
    reduced = reduce_scatter_rows(a @ weight.t(), tp)
    if ep != PLAIN:
        reduced = apply_epilogue(reduced, ep, bias, None, a.dtype)
        bias = None
    if out is None:
        out = reduced
    else:
        out.copy_(reduced)
    if bias is not None:
        out += bias
    return out
