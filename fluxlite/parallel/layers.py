"""``ColumnParallelLinear`` and ``RowParallelLinear`` with Megatron-core's constructor signatures,
parameter names, shapes and TP attributes, and ``(output, output_bias)`` returns.

Differences from Megatron, all deliberate:

* ``overlap="auto" | "fused" | "decomposed" | "sequential"`` (an extra keyword, any of
  :data:`fluxlite._validate.IMPLS`) picks the implementation of fluxlite's ops under sequence
  parallelism (``impl`` of :func:`fluxlite.ag_gemm` / :func:`fluxlite.gemm_rs`). ``"auto"`` is
  measured per shape (:mod:`fluxlite.dispatch`); the layers follow the op's choice (the Column dgrad
  asks it, :func:`fluxlite.library.start_column_dgrad`).
* Under sequence parallelism the layers run through fluxlite's custom ops (``torch.ops.fluxlite.*``),
  so a model built from them compiles with ``torch.compile(fullgraph=True)``; with
  ``gradient_accumulation_fusion``, or without sequence parallelism, they run an eager
  ``autograd.Function`` (:mod:`.functions`).
* Weights are always drawn as a full master weight and split by rank (Megatron does so only under
  ``use_cpu_initialization``; otherwise it draws each partition from a per-rank CUDA RNG). So a TP
  layer equals its single-process ``nn.Linear`` twin when every rank seeds alike.
* MoE expert layers (``is_expert=True``) are not supported.

``config.gradient_accumulation_fusion`` works as in Megatron, without apex: the weight grad is
accumulated in fp32 into ``weight.main_grad`` (which Megatron's ``DistributedDataParallel`` sets up),
and the backward raises ``ValueError`` if ``main_grad`` is missing. Parameter attributes
(``tensor_model_parallel``, ``partition_dim``, ``partition_stride``, ``allreduce``, and
``sequence_parallel`` on the Row bias) are Megatron's, so its optimizer, DDP, checkpointing and
``finalize_model_grads`` treat these parameters as they treat their own.
"""

from __future__ import annotations

import copy
from typing import Callable, Optional

import torch
from torch.nn import Parameter

from .._validate import IMPLS
from ..epilogue import ACTIVATIONS
from .config import check_config
from .functions import LinearOptions, column_parallel_linear, row_parallel_linear
from .mappings import gather_from_tensor_model_parallel_region, scatter_to_tensor_model_parallel_region
from .utils import (
    divide,
    init_partition_,
    param_device,
    set_tensor_model_parallel_attributes,
    tp_group_of,
    warn_once,
)

# Megatron keywords that have no meaning here are accepted and ignored, with a one-time warning when
# set, except these: the TP group comes from pg_collection, and `name` (0.18+, passed by Megatron's own
# modules) is ignored by Megatron's layers too.
_CONSUMED_KWARGS = ("pg_collection", "name")
# fluxlite's own keywords that no longer exist, and what to do instead (set, they warn with this).
_REMOVED_KWARGS = {
    "keep_gathered_input": "has been removed and is ignored: under sequence parallelism the Column layer always "
                           "keeps only this rank's input rows and gathers them again in the backward, which is as "
                           "fast and uses less memory. Remove the keyword; nothing else needs to change",
}


def _check_overlap(overlap: str) -> str:
    if overlap not in IMPLS:
        raise ValueError(f"overlap must be one of {IMPLS}, got {overlap!r}")
    return overlap


def _ignore(cls_name: str, **kwargs) -> None:
    for key, value in kwargs.items():
        if key in _CONSUMED_KWARGS or value is None or value is False:
            continue
        why = _REMOVED_KWARGS.get(key, "has no meaning in fluxlite and is ignored")
        warn_once((cls_name, key), f"fluxlite.parallel.{cls_name}: keyword {key}={value!r} {why}")


class _ParallelLinear(torch.nn.Module):
    """What the two layers share: config, group, overlap, Megatron's extra-state and repr."""

    def _setup(self, input_size: int, output_size: int, skip_bias_add: bool, config, tp_group, overlap: str,
               is_expert: bool, kwargs: dict) -> None:
        check_config(config)
        self.input_size = input_size
        self.output_size = output_size
        self.skip_bias_add = skip_bias_add
        if is_expert:
            raise NotImplementedError(f"fluxlite.parallel.{type(self).__name__} does not support is_expert=True (MoE experts)")
        self.config = config
        self.overlap = _check_overlap(overlap)
        self._tp = tp_group_of(tp_group, kwargs.get("pg_collection"))
        self.tp_group = self._tp.group
        self.is_expert = False
        self.explicit_expert_comm = False
        self.gradient_accumulation_fusion = bool(getattr(config, "gradient_accumulation_fusion", False))
        self.sequence_parallel = bool(config.sequence_parallel)
        if self.sequence_parallel and self._tp.world_size <= 1:
            warn_once(
                (type(self).__name__, "sp1"),
                "`sequence_parallel` is set to `True`, but the tensor-parallel size is 1. Disabling sequence parallel.",
            )
            self.sequence_parallel = False
        _ignore(type(self).__name__, **kwargs)
        # A Megatron state_dict carries `_extra_state` (None) for every linear layer: accept it, with or without.
        self._register_load_state_dict_pre_hook(
            lambda state_dict, prefix, *args, **kw: state_dict.setdefault(f"{prefix}_extra_state")
        )

    def __deepcopy__(self, memo: dict) -> "_ParallelLinear":
        """A copy with parameters of its own (an EMA or reference model), sharing the process group
        and the config: a group is a handle to the ranks' communicator (``copy.deepcopy`` of one
        fails), and every layer of a model reads one config. torch's copy of a ``Parameter`` keeps
        its data and ``requires_grad`` only, so the TP attributes that Megatron's optimizer and
        checkpointing read (``tensor_model_parallel``, ``partition_dim``, ...) are copied over; a
        tensor attribute (Megatron's ``main_grad``) belongs to the original's buffers and is not."""
        for shared in (self.tp_group, self._tp, self.config):
            memo.setdefault(id(shared), shared)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        for name, param in self.named_parameters(recurse=False):
            twin = getattr(new, name)
            for key, value in vars(param).items():
                if not isinstance(value, torch.Tensor):
                    setattr(twin, key, copy.deepcopy(value, memo))
        return new

    def _check_input(self, input_, features: int, weight: torch.Tensor) -> None:
        """A bad input, before any GEMM or collective, named by the layer: a tensor of at least 2 dims
        ``[..., features]`` on ``weight``'s device, of ``weight``'s dtype (unless autocast is on for
        that device, which casts the layer's own GEMMs)."""
        name = type(self).__name__
        if not isinstance(input_, torch.Tensor):
            raise TypeError(f"{name} expects a torch.Tensor input [..., {features}], got {type(input_).__name__}")
        if input_.dim() < 2 or input_.shape[-1] != features:
            raise ValueError(f"{name} expects input [..., {features}] (at least 2-D), got {tuple(input_.shape)}")
        if input_.device != weight.device:
            raise ValueError(f"{name} expects input on its weight's device ({weight.device}), got {input_.device}")
        if input_.dtype != weight.dtype and not torch.is_autocast_enabled(input_.device.type):
            raise TypeError(f"{name} expects input of its weight's dtype ({weight.dtype}), got {input_.dtype}")

    def _set_activation(self, activation: Optional[str]) -> None:
        """Check and keep a Column layer's ``activation`` (after ``output_size_per_partition`` is set)."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if activation is not None and self.skip_bias_add:
            raise ValueError(f"activation={activation!r} applies to X A + b, so skip_bias_add must be False, got True")
        if activation == "swiglu" and self.output_size_per_partition % 2:
            raise ValueError(f"activation='swiglu' needs an even output_size / tp (gate and up halves), got "
                             f"{self.output_size} / {self._tp.world_size} = {self.output_size_per_partition}")
        self.activation = activation

    def _options(self, **extra) -> LinearOptions:
        """What the autograd function needs, read at each forward (``overlap`` may change between steps)."""
        return LinearOptions(self._tp, self.sequence_parallel, self.overlap,
                             gradient_accumulation_fusion=self.gradient_accumulation_fusion, **extra)

    def _make_weight(self, shape, partition_dim, init_method, stride, keep_master):
        cfg = self.config
        device = param_device(cfg, self._tp)
        weight = Parameter(torch.empty(*shape, dtype=cfg.params_dtype, device=device))
        full = (self.output_size, self.input_size)
        self.master_weight = None
        if cfg.perform_initialization:
            self.master_weight = init_partition_(
                weight.data, full, partition_dim, init_method, stride=stride, tp=self._tp,
                on_cpu=bool(cfg.use_cpu_initialization) or device.type == "cpu", keep_master=keep_master,
            )
        set_tensor_model_parallel_attributes(weight, True, partition_dim, stride)
        weight.allreduce = True
        return weight

    def _make_bias(self, size):
        cfg = self.config
        bias = Parameter(torch.empty(size, dtype=cfg.params_dtype, device=param_device(cfg, self._tp)))
        if cfg.perform_initialization:
            with torch.no_grad():
                bias.zero_()
        bias.allreduce = True
        return bias

    def backward_dw(self) -> None:
        """Megatron's delayed-wgrad hook; the weight grad is computed in the backward, so a no-op."""

    def set_extra_state(self, state) -> None:
        """Extra state is ignored (Megatron/TransformerEngine compatibility)."""

    def get_extra_state(self) -> None:
        return None

    def _sharded(self, prefix, sharded_offsets, metadata, axis_map):
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        state_dict = self.state_dict(prefix="", keep_vars=True)
        kwargs = {"tp_group": self.tp_group}
        if metadata is not None and "dp_cp_group" in metadata:
            kwargs["dp_cp_group"] = metadata["dp_cp_group"]
        return make_sharded_tensors_for_checkpoint(state_dict, prefix, axis_map, sharded_offsets, **kwargs)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.input_size}, out_features={self.output_size}, bias={self.bias is not None}, "
            f"TP={self._tp.world_size}, sequence_parallel={self.sequence_parallel}, overlap={self.overlap!r}"
        ) + (f", activation={self.activation!r}" if getattr(self, "activation", None) else "")


class ColumnParallelLinear(_ParallelLinear):
    """``Y = X A + b`` with ``A`` split along its output dim: this rank holds ``weight [out/tp, in]``
    (and ``bias [out/tp]``) and computes its slice of the output columns.

    Input ``[s, b, in]`` (replicated), or ``[s/tp, b, in]`` under sequence parallelism (all-gathered
    along the sequence by the fused AG-GEMM). Output ``[s, b, out/tp]``, or ``[s, b, out]`` with
    ``gather_output``. Returns ``(output, output_bias)``: ``output_bias`` is the bias when
    ``skip_bias_add`` (then it is not added), else ``None``.

    Under sequence parallelism the layer keeps only its input ``[s/tp, b, in]`` for the backward, which
    gathers it again for wgrad, overlapped with the dgrad GEMM-RS, as Megatron does.

    ``activation`` (fluxlite's, not Megatron's): ``None``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"`` or
    ``"swiglu"``, applied to ``X A + b``; under sequence parallelism in the fused AG-GEMM's epilogue.
    ``"swiglu"`` takes Megatron's gated fc1 (``output_size = 2 * ffn``; each rank's weight holds its
    gate rows, then its up rows) and outputs ``ffn / tp`` columns per rank. The bias is inside the
    activation, so ``skip_bias_add`` cannot go with it.
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config,
        init_method: Callable,
        bias: bool = True,
        gather_output: bool = False,
        stride: int = 1,
        keep_master_weight_for_test: bool = False,
        skip_bias_add: bool = False,
        skip_weight_param_allocation: bool = False,
        embedding_activation_buffer=None,
        grad_output_buffer=None,
        is_expert: bool = False,
        tp_comm_buffer_name: Optional[str] = None,
        disable_grad_reduce: bool = False,
        tp_group=None,
        overlap: str = "auto",
        activation: Optional[str] = None,
        **kwargs,
    ):
        super().__init__()
        self.gather_output = gather_output
        self.disable_grad_reduce = disable_grad_reduce
        self._setup(
            input_size, output_size, skip_bias_add, config, tp_group, overlap, is_expert,
            dict(kwargs, embedding_activation_buffer=embedding_activation_buffer,
                 grad_output_buffer=grad_output_buffer, tp_comm_buffer_name=tp_comm_buffer_name),
        )
        W = self._tp.world_size
        self.output_size_per_partition = divide(output_size, W, "output_size")
        self._set_activation(activation)
        if skip_weight_param_allocation:
            self.weight = None
            self.master_weight = None
        else:
            self.weight = self._make_weight(
                (self.output_size_per_partition, input_size), 0, init_method, stride, keep_master_weight_for_test
            )
        if bias:
            self.bias = self._make_bias(self.output_size_per_partition)
            set_tensor_model_parallel_attributes(self.bias, True, 0, stride)
        else:
            self.register_parameter("bias", None)
        self.allreduce_dgrad = W > 1 and not self.sequence_parallel and not disable_grad_reduce

    def forward(self, input_: torch.Tensor, weight: Optional[torch.Tensor] = None, runtime_gather_output: Optional[bool] = None):
        if weight is None:
            if self.weight is None:
                raise RuntimeError(
                    "weight was not supplied to ColumnParallelLinear forward pass and skip_weight_param_allocation is True."
                )
            weight = self.weight
        else:
            expected = (self.output_size_per_partition, self.input_size)
            if tuple(weight.shape) != expected:
                raise RuntimeError(f"supplied weight's shape is {tuple(weight.shape)}, not {expected} as expected")
        self._check_input(input_, self.input_size, weight)
        bias = self.bias if not self.skip_bias_add else None
        options = self._options(allreduce_dgrad=self.allreduce_dgrad, activation=self.activation)
        output = column_parallel_linear(input_, weight, bias, options)
        gather_output = self.gather_output if runtime_gather_output is None else runtime_gather_output
        if gather_output:
            output = gather_from_tensor_model_parallel_region(output, group=self.tp_group)
        return output, (self.bias if self.skip_bias_add else None)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        """Megatron distributed checkpointing: weight and bias sharded along dim 0."""
        return self._sharded(prefix, sharded_offsets, metadata, {"weight": 0, "bias": 0})


class RowParallelLinear(_ParallelLinear):
    """``Y = X A + b`` with ``A`` split along its input dim: this rank holds ``weight [out, in/tp]``;
    the bias ``[out]`` is replicated and added once, after the reduction.

    Input ``[s, b, in/tp]`` (``input_is_parallel``) or ``[s, b, in]`` (then split here). Output
    ``[s, b, out]`` (all-reduced), or ``[s/tp, b, out]`` under sequence parallelism (reduce-scattered
    along the sequence by the fused GEMM-RS; requires ``input_is_parallel``). Returns
    ``(output, output_bias)`` as :class:`ColumnParallelLinear`.

    Under sequence parallelism the bias gradient on each rank is the sum over that rank's rows only;
    the bias is marked ``sequence_parallel = True`` and must be all-reduced over the TP group before
    the optimizer step (Megatron's ``finalize_model_grads`` does it, or call
    :func:`fluxlite.parallel.allreduce_sequence_parallel_grads`).
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config,
        init_method: Callable,
        bias: bool,
        input_is_parallel: bool,
        skip_bias_add: bool,
        stride: int = 1,
        keep_master_weight_for_test: bool = False,
        is_expert: bool = False,
        tp_comm_buffer_name: Optional[str] = None,
        tp_group=None,
        overlap: str = "auto",
        **kwargs,
    ):
        super().__init__()
        self.input_is_parallel = input_is_parallel
        if getattr(config, "sequence_parallel", False) and not input_is_parallel:
            raise RuntimeError("To enable `sequence_parallel`, `input_is_parallel` must be `True`")
        self._setup(input_size, output_size, skip_bias_add, config, tp_group, overlap, is_expert,
                    dict(kwargs, tp_comm_buffer_name=tp_comm_buffer_name))
        self.input_size_per_partition = divide(input_size, self._tp.world_size, "input_size")
        self.weight = self._make_weight(
            (output_size, self.input_size_per_partition), 1, init_method, stride, keep_master_weight_for_test
        )
        if bias:
            self.bias = self._make_bias(output_size)
            self.bias.sequence_parallel = self.sequence_parallel
        else:
            self.register_parameter("bias", None)

    def forward(self, input_: torch.Tensor):
        expected = self.input_size_per_partition if self.input_is_parallel else self.input_size
        self._check_input(input_, expected, self.weight)
        x = input_ if self.input_is_parallel else scatter_to_tensor_model_parallel_region(input_, group=self.tp_group)
        bias = self.bias if not self.skip_bias_add else None
        output = row_parallel_linear(x, self.weight, bias, self._options())
        return output, (self.bias if self.skip_bias_add else None)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        """Megatron distributed checkpointing: weight sharded along dim 1, bias replicated."""
        return self._sharded(prefix, sharded_offsets, metadata, {"weight": 1})
