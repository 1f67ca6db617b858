"""The reference implementations: one collective, then one matmul (or the other way round).

These are the baselines every fused path is measured against, and what ``impl="auto"`` falls back
to where fusion does not pay.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

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


def ag_gemm(tp: TPGroup, a, weight, bias, out=None):
    """``(all_gather(a) @ weight.T (+ bias), all_gather(a))``; ``a: [m, K]``, ``weight: [N_local, K]``."""
    gathered = all_gather_rows(a, tp)
    return linear_into(out, gathered, weight, bias), gathered


def gemm_rs(tp: TPGroup, a, weight, bias, out=None):
    """``reduce_scatter(a @ weight.T) (+ bias)``; ``a: [M, K_local]``, ``weight: [N, K_local]``."""
    reduced = reduce_scatter_rows(a @ weight.t(), tp)
    if out is None:
        out = reduced
    else:
        out.copy_(reduced)
    if bias is not None:
        out += bias
    return out
