"""Input checks shared by the public ops. Everything here runs before any communication or launch."""

from __future__ import annotations

import torch

from .group import TPGroup
from .host_flags import timeout_problem

IMPLS = ("sequential", "decomposed", "fused", "auto")
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_impl(impl: str) -> str:
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return impl


def check_matrix(name: str, t, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D {layout}, got {t.dim()}-D with shape {tuple(t.shape)}")


def check_operands(op: str, tp: TPGroup, a, weight, bias, a_layout: str, w_layout: str) -> None:
    """Check ``a``, ``weight``, ``bias`` of ``op`` against each other and the group."""
    check_matrix(f"{op}: a", a, a_layout)
    check_matrix(f"{op}: weight", weight, w_layout)
    if a.shape[1] != weight.shape[1]:
        raise ValueError(
            f"{op}: a and weight must share K (the last dim): a is {tuple(a.shape)} {a_layout}, "
            f"weight is {tuple(weight.shape)} {w_layout}; expected weight.shape[1] == {a.shape[1]}, got {weight.shape[1]}"
        )
    if a.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{op}: a.dtype must be one of {_FLOAT_DTYPES}, got {a.dtype}")
    if weight.dtype != a.dtype:
        raise TypeError(f"{op}: weight.dtype must match a.dtype ({a.dtype}), got {weight.dtype}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"{op}: bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.dim() != 1 or bias.shape[0] != weight.shape[0]:
            raise ValueError(f"{op}: bias must be 1-D [{weight.shape[0]}] (weight.shape[0]), got shape {tuple(bias.shape)}")
        if bias.dtype != a.dtype:
            raise TypeError(f"{op}: bias.dtype must match a.dtype ({a.dtype}), got {bias.dtype}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} must be on a's device ({a.device}), got {t.device}")
    if a.device.type not in tp.device_types:
        raise ValueError(
            f"{op}: tensors are on {a.device}, but the process group's backend serves only "
            f"{sorted(tp.device_types)} tensors; use a group whose backend handles {a.device.type}"
        )
    if a.device.type == "cuda" and a.device.index != torch.cuda.current_device():
        raise ValueError(
            f"{op}: a is on {a.device} but the current CUDA device is cuda:{torch.cuda.current_device()}; "
            f"call torch.cuda.set_device({a.device.index}) first"
        )


def operands_as_used(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, gated: bool = False):
    """The checked operands as the ops use them: ``a`` and ``bias`` contiguous; the weight in
    ``nn.Linear`` layout or its transpose (a backward's ``W.t()``: no copy), row-major when ``gated``
    (the kernels read SwiGLU's gate and up rows). A copy where needed, never a silent wrong answer."""
    # The ops are not differentiable (the autograd functions in fluxlite.parallel call them): detach,
    # so that no producer thread or side stream ever records autograd history.
    a, bias = a.detach().contiguous(), None if bias is None else bias.detach().contiguous()
    weight = weight.detach()
    if gated or not (weight.is_contiguous() or weight.t().is_contiguous()):
        weight = weight.contiguous()
    return a, weight, bias


def check_rows_divisible(op: str, rows: int, world_size: int) -> None:
    if rows % world_size:
        raise ValueError(
            f"{op}: a.shape[0] (M = {rows}) must be divisible by the group size ({world_size}) "
            f"to reduce-scatter rows; got remainder {rows % world_size}"
        )


def check_timeout(timeout) -> None:
    problem = None if timeout is None else timeout_problem(timeout)
    if problem:
        raise ValueError(f"timeout must be None or {problem}, got {timeout!r}")


def check_out(op: str, out, shape: tuple[int, ...], like: torch.Tensor) -> None:
    """``out`` (optional, caller-allocated result) must be contiguous ``shape`` in ``like``'s dtype/device."""
    if out is None:
        return
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor or None, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.dtype != like.dtype:
        raise TypeError(f"{op}: out.dtype must be {like.dtype}, got {out.dtype}")
    if out.device != like.device:
        raise ValueError(f"{op}: out must be on {like.device}, got {out.device}")
    if not out.is_contiguous():
        raise ValueError(f"{op}: out must be contiguous, got strides {out.stride()} for shape {tuple(out.shape)}")


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """``[first, last + 1)`` byte addresses that ``t``'s elements may occupy (empty for no elements)."""
    start, count = t.data_ptr(), t.numel()
    if count == 0:
        return start, start
    if not t.is_contiguous():
        count = 1 + sum([(size - 1) * stride for size, stride in zip(t.shape, t.stride())])
    return start, start + count * t.element_size()


def check_disjoint(op: str, out: torch.Tensor, inputs: dict) -> None:
    """``out`` shares no memory with any of ``inputs`` (name: tensor or None; all checked to be on
    ``out``'s device, whose addresses are unique in the process). Every impl reads its inputs while it
    writes ``out`` (a fused call's tiles, a matmul's output), so an ``out`` that is also an input gives
    a wrong answer, not an error: refused here. Spans are compared, so a view interleaved with
    ``out`` without sharing an element is refused too."""
    lo, hi = _byte_span(out)
    if lo == hi:
        return
    for name, t in inputs.items():
        if t is not None:
            t_lo, t_hi = _byte_span(t)
            if t_lo < hi and lo < t_hi:
                raise ValueError(f"{op}: out must not share memory with {name} (bytes {lo:#x}-{hi:#x} and "
                                 f"{t_lo:#x}-{t_hi:#x}); pass a separate out, or none")
