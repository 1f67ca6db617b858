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


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.addmm(bias, x, weight.t()) if bias is not None else x @ weight.t()


def ag_gemm(tp: TPGroup, a, weight, bias, return_gathered: bool):
    """``all_gather(a) @ weight.T (+ bias)``; ``a: [m, K]``, ``weight: [N_local, K]``."""
    gathered = all_gather_rows(a, tp)
    out = _linear(gathered, weight, bias)
    return (out, gathered) if return_gathered else out


def gemm_rs(tp: TPGroup, a, weight, bias):
    """``reduce_scatter(a @ weight.T) (+ bias)``; ``a: [M, K_local]``, ``weight: [N, K_local]``."""
    out = reduce_scatter_rows(a @ weight.t(), tp)
    if bias is not None:
        out += bias
    return out
