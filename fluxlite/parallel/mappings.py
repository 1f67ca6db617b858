"""Megatron's tensor-parallel mapping functions, with the same names and the same backwards.

"First dim" is the sequence dim (sequence parallelism splits it); "last dim" is the hidden dim
(tensor parallelism splits it). Gathers are rank-major. Every function takes ``group`` (a
``ProcessGroup``; default: Megatron's TP group when its parallel state is initialised, else the
default process group). The collectives are functional (:mod:`fluxlite.library`'s ``start_*``, then
``wait``), out of place: under ``torch.compile`` on torch 2.11, these functions built on the in-place
``dist`` collectives gave zero grads, with no error (tests/test_compile_cpu.py, run on 2.11).

================================================  ===========================  ===========================
function                                          forward                      backward
================================================  ===========================  ===========================
copy_to_tensor_model_parallel_region              identity                     all-reduce
reduce_from_tensor_model_parallel_region          all-reduce                   identity
scatter_to_tensor_model_parallel_region           split last dim               all-gather last dim
gather_from_tensor_model_parallel_region          all-gather last dim          split last dim
scatter_to_sequence_parallel_region               split first dim              all-gather first dim
gather_from_sequence_parallel_region              all-gather first dim         reduce-scatter first dim
                                                                               (split, if not
                                                                               tensor_parallel_output_grad)
reduce_scatter_to_sequence_parallel_region        reduce-scatter first dim     all-gather first dim
================================================  ===========================  ===========================
"""

from __future__ import annotations

import torch

from ..group import TPGroup
from ..library import start_all_gather_rows, start_all_reduce, start_reduce_scatter_rows, wait
from .utils import tp_group_of

__all__ = [
    "copy_to_tensor_model_parallel_region",
    "gather_from_sequence_parallel_region",
    "gather_from_tensor_model_parallel_region",
    "reduce_from_tensor_model_parallel_region",
    "reduce_scatter_to_sequence_parallel_region",
    "scatter_to_sequence_parallel_region",
    "scatter_to_tensor_model_parallel_region",
]


# ---- the primitives (no autograd) ----------------------------------------------------------------

def _all_reduce(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """The sum over ranks, in a new tensor (never in place: autograd may hand one grad to several users)."""
    return wait(start_all_reduce(x.contiguous(), tp))


def _split_first(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    W = tp.world_size
    if W == 1:
        return x
    if x.shape[0] % W:
        raise ValueError(f"the first dim ({x.shape[0]}) must be divisible by the tensor-parallel size ({W})")
    m = x.shape[0] // W
    # A copy, not a view of the input: torch 2.11's AOTAutograd gave an autograd.Function whose
    # output is a view of its input a zero grad (it bypassed the backward), with no error.
    return x[tp.rank * m : (tp.rank + 1) * m].clone()


def _split_last(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    W = tp.world_size
    if W == 1:
        return x
    if x.shape[-1] % W:
        raise ValueError(f"the last dim ({x.shape[-1]}) must be divisible by the tensor-parallel size ({W})")
    n = x.shape[-1] // W
    return x[..., tp.rank * n : (tp.rank + 1) * n].contiguous()


def _gather_first(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    return wait(start_all_gather_rows(x, tp))


def _gather_last(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    if tp.world_size == 1:
        return x
    gathered = _gather_first(x.movedim(-1, 0), tp)  # [W*n, ...], rank-major
    return gathered.movedim(0, -1).contiguous()


def _reduce_scatter_first(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    if tp.world_size > 1 and x.shape[0] % tp.world_size:
        raise ValueError(
            f"the first dim ({x.shape[0]}) must be divisible by the tensor-parallel size ({tp.world_size})"
        )
    return wait(start_reduce_scatter_rows(x, tp))


# ---- the autograd functions ----------------------------------------------------------------------

def _mapping(name: str, fwd, bwd):
    """An autograd function with ``forward = fwd(x)`` and ``backward = bwd(grad)``."""

    def forward(ctx, x, tp: TPGroup):
        ctx.tp = tp
        return fwd(x, tp)

    def backward(ctx, grad):
        return bwd(grad, ctx.tp), None

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def _identity(x, tp):
    return x


_CopyToTP = _mapping("_CopyToTP", _identity, _all_reduce)
_ReduceFromTP = _mapping("_ReduceFromTP", _all_reduce, _identity)
_ScatterToTP = _mapping("_ScatterToTP", _split_last, _gather_last)
_GatherFromTP = _mapping("_GatherFromTP", _gather_last, _split_last)
_ScatterToSP = _mapping("_ScatterToSP", _split_first, _gather_first)
_GatherFromSP = _mapping("_GatherFromSP", _gather_first, _reduce_scatter_first)
_GatherFromSPReplicatedGrad = _mapping("_GatherFromSPReplicatedGrad", _gather_first, _split_first)
_ReduceScatterToSP = _mapping("_ReduceScatterToSP", _reduce_scatter_first, _gather_first)


# ---- Megatron's public names ---------------------------------------------------------------------

def copy_to_tensor_model_parallel_region(input_, group=None):
    """Forward: identity. Backward: all-reduce over the TP group."""
    return _CopyToTP.apply(input_, tp_group_of(group))


def reduce_from_tensor_model_parallel_region(input_, group=None):
    """Forward: all-reduce over the TP group. Backward: identity."""
    return _ReduceFromTP.apply(input_, tp_group_of(group))


def scatter_to_tensor_model_parallel_region(input_, group=None):
    """Forward: keep this rank's slice of the last dim. Backward: all-gather the last dim."""
    return _ScatterToTP.apply(input_, tp_group_of(group))


def gather_from_tensor_model_parallel_region(input_, group=None):
    """Forward: all-gather the last dim (rank-major). Backward: keep this rank's slice of it."""
    return _GatherFromTP.apply(input_, tp_group_of(group))


def scatter_to_sequence_parallel_region(input_, group=None):
    """Forward: keep this rank's slice of the first dim. Backward: all-gather the first dim."""
    return _ScatterToSP.apply(input_, tp_group_of(group))


def gather_from_sequence_parallel_region(
    input_, tensor_parallel_output_grad=True, group=None, output_split_sizes=None, use_global_buffer=False
):
    """Forward: all-gather the first dim. Backward: reduce-scatter the first dim, or, when
    ``tensor_parallel_output_grad`` is False (the consumer is replicated, so every rank holds the
    whole grad), keep this rank's slice. ``use_global_buffer`` is accepted and ignored; uneven
    ``output_split_sizes`` are not supported."""
    if output_split_sizes is not None:
        raise NotImplementedError("fluxlite's gather_from_sequence_parallel_region supports equal splits only")
    fn = _GatherFromSP if tensor_parallel_output_grad else _GatherFromSPReplicatedGrad
    return fn.apply(input_, tp_group_of(group))


def reduce_scatter_to_sequence_parallel_region(input_, group=None, input_split_sizes=None, use_global_buffer=False):
    """Forward: reduce-scatter the first dim. Backward: all-gather the first dim.
    ``use_global_buffer`` is accepted and ignored; uneven ``input_split_sizes`` are not supported."""
    if input_split_sizes is not None:
        raise NotImplementedError("fluxlite's reduce_scatter_to_sequence_parallel_region supports equal splits only")
    return _ReduceScatterToSP.apply(input_, tp_group_of(group))
