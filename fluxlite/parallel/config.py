"""The configuration the layers read: a small stand-in for ``megatron.core.ModelParallelConfig``.

The layers accept *any* object with the four attributes below (a real Megatron
``ModelParallelConfig`` or ``TransformerConfig`` works as it is). Other Megatron fields the layers
look at are read with ``getattr`` and a default, so this dataclass needs only what fluxlite uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

REQUIRED_FIELDS = ("sequence_parallel", "params_dtype", "perform_initialization", "use_cpu_initialization")


@dataclass
class ModelParallelConfig:
    """What :class:`ColumnParallelLinear` and :class:`RowParallelLinear` need to know.

    Attributes:
        sequence_parallel: activations outside the TP region are split along the sequence (dim 0);
            the layers then all-gather / reduce-scatter rows instead of all-reducing.
        params_dtype: dtype of the weights and biases.
        perform_initialization: draw the weights with ``init_method`` (biases are zeroed); if False
            they are left uninitialised (``torch.empty``), as in Megatron.
        use_cpu_initialization: build the parameters (and the full master weight) on the CPU. If
            False, they are built on the current CUDA device when the TP group serves CUDA.
        tensor_model_parallel_size: informational; the layers use the TP group's size.
        gradient_accumulation_fusion: accumulate weight grads in fp32 into ``weight.main_grad`` (set up
            by Megatron's ``DistributedDataParallel``) instead of returning them, as Megatron does.
    """

    sequence_parallel: bool = False
    params_dtype: torch.dtype = torch.float32
    perform_initialization: bool = True
    use_cpu_initialization: bool = False
    tensor_model_parallel_size: int = 1
    gradient_accumulation_fusion: bool = False


def check_config(config) -> None:
    missing = [f for f in REQUIRED_FIELDS if not hasattr(config, f)]
    if missing:
        raise TypeError(
            f"config must have the attributes {REQUIRED_FIELDS} (a fluxlite.parallel.ModelParallelConfig "
            f"or a megatron.core ModelParallelConfig/TransformerConfig); {type(config).__name__} lacks {missing}"
        )
    if not isinstance(config.params_dtype, torch.dtype):
        raise TypeError(f"config.params_dtype must be a torch.dtype, got {config.params_dtype!r}")
