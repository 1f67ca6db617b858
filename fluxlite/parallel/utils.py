"""Helpers shared by the layers and mappings: the TP group, weight partitioning and initialisation,
one-time warnings, and the gradient all-reduce that sequence parallelism needs."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from typing import Callable, Union

import torch
import torch.distributed as dist

from ..group import TPGroup, resolve_group
from ..process import PROCESS

def warn_once(key, message: str) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process (:data:`fluxlite.process.PROCESS`)."""
    if key not in PROCESS.warned:
        PROCESS.warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def divide(numerator: int, denominator: int, what: str = "size") -> int:
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) must be divisible by the tensor-parallel size ({denominator})")
    return numerator // denominator


def _megatron_tp_group():
    """Megatron's TP group if Megatron is imported and its parallel state is set up, else None."""
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None:
        return None
    try:
        if ps.model_parallel_is_initialized():
            return ps.get_tensor_model_parallel_group()
    except Exception:  # an older/newer parallel_state without these: fall back to WORLD
        return None
    return None


def tp_group_of(group=None, pg_collection=None) -> TPGroup:
    """The TP group: ``group``, else ``pg_collection.tp``, else Megatron's TP group (when Megatron's
    parallel state is initialised), else the default process group."""
    if group is None and pg_collection is not None:
        group = getattr(pg_collection, "tp", None)
    if group is None:
        group = _megatron_tp_group()
    return resolve_group(group)


def param_device(config, tp: TPGroup) -> torch.device:
    """Where the parameters live: the CPU under ``use_cpu_initialization`` or for a CPU-only group,
    else the current CUDA device (as Megatron)."""
    if not config.use_cpu_initialization and "cuda" in tp.device_types and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def partition_index(size: int, world_size: int, rank: int, stride: int = 1) -> torch.Tensor:
    """Indices of the full dim ``size`` that ``rank`` holds, Megatron's strided split: the dim is cut
    into ``world_size * stride`` equal blocks and rank ``r`` holds blocks ``r, r + W, r + 2W, ...``."""
    per_partition = divide(size, world_size)
    block = divide(per_partition, stride, what=f"per-partition size {per_partition} / stride")
    blocks = [torch.arange(b * block, (b + 1) * block) for b in range(rank, world_size * stride, world_size)]
    return torch.cat(blocks)


def init_partition_(
    weight: torch.Tensor,
    full_shape: tuple[int, int],
    partition_dim: int,
    init_method: Callable,
    *,
    stride: int,
    tp: TPGroup,
    on_cpu: bool,
    keep_master: bool,
):
    """Draw the full master weight with ``init_method`` (fp32), cast it to ``weight.dtype``, and copy
    this rank's partition into ``weight``. Returns the master weight when ``keep_master``.

    The master weight is drawn from the default generator of the device it is made on (the CPU when
    ``on_cpu``, else ``weight.device``). Every rank of the TP group must be in the same RNG state
    (``torch.manual_seed(seed)`` on every rank, as Megatron's CPU initialisation also requires); then
    the TP layer equals an ``nn.Linear`` whose weight was drawn the same way.
    """
    device = torch.device("cpu") if on_cpu else weight.device
    master = torch.empty(full_shape, dtype=torch.float32, device=device)
    init_method(master)
    master = master.to(weight.dtype)
    idx = partition_index(full_shape[partition_dim], tp.world_size, tp.rank, stride).to(device)
    with torch.no_grad():
        weight.copy_(master.index_select(partition_dim, idx))
    return master if keep_master else None


def set_tensor_model_parallel_attributes(param: torch.Tensor, is_parallel: bool, dim: int, stride: int) -> None:
    """Megatron's TP attributes, read by its optimizer, checkpointing and grad clipping."""
    param.tensor_model_parallel = is_parallel
    param.partition_dim = dim
    param.partition_stride = stride


ModulesOrParams = Union[torch.nn.Module, Iterable[Union[torch.nn.Module, torch.Tensor]]]


def _parameters(modules_or_params: ModulesOrParams) -> list[torch.Tensor]:
    """The distinct parameters of a module, of a list of modules, or of an iterable of parameters
    (a parameter shared by two modules counts once), in a deterministic order."""
    items = [modules_or_params] if isinstance(modules_or_params, torch.nn.Module) else modules_or_params
    if isinstance(items, torch.Tensor) or not isinstance(items, Iterable):
        raise TypeError(
            "allreduce_sequence_parallel_grads takes a module, a list of modules or an iterable of parameters, "
            f"got {type(modules_or_params).__name__}"
        )
    params: dict[int, torch.Tensor] = {}
    for item in items:
        if isinstance(item, torch.nn.Module):
            params.update((id(p), p) for p in item.parameters())
        elif isinstance(item, torch.Tensor):
            params.setdefault(id(item), item)
        else:
            raise TypeError(
                "allreduce_sequence_parallel_grads takes modules or parameters (torch.Tensor), "
                f"got an item of type {type(item).__name__}"
            )
    return list(params.values())


def allreduce_sequence_parallel_grads(modules_or_params: ModulesOrParams, group=None) -> int:
    """All-reduce, over the TP group, the grads of the parameters marked ``sequence_parallel``.

    Under sequence parallelism a replicated parameter that acts on this rank's rows only (the
    ``RowParallelLinear`` bias, LayerNorm weights) gets a partial gradient on each rank: the sum over
    its own rows. Megatron marks such parameters ``sequence_parallel = True`` and its
    ``finalize_model_grads`` all-reduces them over the TP group before the optimizer step. Call this
    in the same place when training without Megatron. (Inside Megatron, do not call it: Megatron does.)

    Args:
        modules_or_params: a module, a list of modules (model chunks), or an iterable of parameters.
            A parameter reached twice is reduced once.
        group: the TP group (default: Megatron's when its parallel state is set up, else the default group).

    The grad reduced is ``param.main_grad`` where it exists (Megatron's DDP buffers), else ``param.grad``,
    as in Megatron. Returns how many grads were reduced. One flat all-reduce per (dtype, device).
    """
    params = _parameters(modules_or_params)
    tp = tp_group_of(group)
    grads = []
    for p in params:
        grad = p.main_grad if hasattr(p, "main_grad") else p.grad
        if getattr(p, "sequence_parallel", False) and grad is not None:
            grads.append(grad)
    if tp.world_size == 1 or not grads:
        return len(grads)
    by_dtype: dict = {}
    for g in grads:
        by_dtype.setdefault((g.dtype, g.device), []).append(g)
    for bucket in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat, group=tp.group)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
    return len(grads)
