"""Megatron-compatible tensor-parallel layers whose communication hides behind the GEMMs.

Three levels, each in its module (the Liger-Kernel layout):

* ops: :func:`fluxlite.ag_gemm`, :func:`fluxlite.gemm_rs` (no autograd), and the same ops as torch
  custom ops with autograd (:mod:`fluxlite.library`);
* the layers' math (:mod:`.functions`): fluxlite's ops in both directions, through the custom ops
  under sequence parallelism (traceable by ``torch.compile``), else eager autograd functions;
* modules (:mod:`.layers`): :class:`ColumnParallelLinear`, :class:`RowParallelLinear`, drop-in for
  ``megatron.core.tensor_parallel``'s, plus an ``overlap`` keyword.

:mod:`.mappings` has Megatron's region mappings (``gather_from_sequence_parallel_region``, ...).
"""

from .config import ModelParallelConfig
from .functions import ColumnParallelLinearFunction, RowParallelLinearFunction
from .layers import ColumnParallelLinear, RowParallelLinear
from .norm_linear import LayerNormColumnParallelLinear
from .mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_sequence_parallel_region,
    scatter_to_tensor_model_parallel_region,
)
from .utils import allreduce_sequence_parallel_grads, partition_index

__all__ = [
    "ColumnParallelLinear",
    "ColumnParallelLinearFunction",
    "LayerNormColumnParallelLinear",
    "ModelParallelConfig",
    "RowParallelLinear",
    "RowParallelLinearFunction",
    "allreduce_sequence_parallel_grads",
    "copy_to_tensor_model_parallel_region",
    "gather_from_sequence_parallel_region",
    "gather_from_tensor_model_parallel_region",
    "partition_index",
    "reduce_from_tensor_model_parallel_region",
    "reduce_scatter_to_sequence_parallel_region",
    "scatter_to_sequence_parallel_region",
    "scatter_to_tensor_model_parallel_region",
]
