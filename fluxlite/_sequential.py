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
from .kernels import repitch
from .process import PROCESS


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


ROW_UNIT_BYTES = 16
"""cuBLAS runs its fast kernels, and TMA loads rows, only where every row of ``a``, the weight and the
output is a whole number of 16-byte units (``K`` and ``N`` multiples of 8 in bf16)."""
# The rates below were measured on an H200 (bf16, M of 256-8192, K and N of 2000-13227).
ODD_ROW_FLOPS = 1.1e14
"""FLOP/s of cuBLAS's GEMM where a row off 16 bytes is an odd number of elements (2-byte aligned):
95-122 TFLOP/s measured."""
EVEN_ROW_FLOPS = 2.2e14
"""The same where such rows are 4- or 8-byte aligned: 196-264 TFLOP/s measured."""
ALIGNED_FLOPS = 6.5e14
"""FLOP/s of the same GEMMs on operands padded to whole rows: 660-780 TFLOP/s from 2048 rows."""
PAD_BYTES_PER_S = 2.0e12
"""Bytes (of the source) per second of the copy that pads rows off 16 bytes to whole ones (``a`` and
the weight where ``K`` is off; :mod:`fluxlite.kernels.repitch`'s word path: 2.0-2.1e12 measured, where
torch's element-wise copy moved 0.8e12)."""
CROP_BYTES_PER_S = 1.4e12
"""Bytes per second of the copy of a padded output's first ``N`` columns back (``N`` off;
:mod:`fluxlite.kernels.repitch`: 1.4-1.6e12 measured at outputs of 25-105 MB)."""
ROW_PAD_BYTES_PER_S = 1.6e12
"""Bytes per second of the weight's copy where only ``N`` is off: whole rows, a zeroed tail."""
OP_SECONDS = 15e-6
"""What each extra operation of the padding costs beyond its bytes: its host time and its launch.
Small calls are bound by it."""


def whole_row_operands(a: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, weight)`` with ``K`` and ``N`` zero-padded up to whole :data:`ROW_UNIT_BYTES` rows
    (``a: [M, K] -> [M, Kp]``, ``weight: [N, K] -> [Np, Kp]``; a padded one is a contiguous copy),
    or the tensors themselves where their rows already are whole units. Zeros add nothing to the
    product; the padding adds at most ``16 / e - 1`` columns."""
    unit = ROW_UNIT_BYTES // a.element_size()
    pad_k, pad_n = -a.shape[1] % unit, -weight.shape[0] % unit
    if not (pad_k or pad_n):
        return a, weight
    return zero_padded(a, 0, pad_k), zero_padded(weight, pad_n, pad_k)


def zero_padded(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``x: [R, C]`` as a contiguous ``[R + rows, C + cols]`` with zeros after: one copy, and only the
    padding zeroed (a whole zero fill first cost an H200 up to 1.6x the time at large weights). On
    CUDA, rows that gain columns are copied by :mod:`fluxlite.kernels.repitch` (torch's copy moves
    such rows, off 16 bytes, element by element)."""
    if not cols and not rows:
        return x
    R, C = x.shape
    y = x.new_empty((R + rows, C + cols))
    if cols and x.is_cuda and repitch.launch(x, y, _repitch_cache(x.device)):
        return y
    y[:R, :C].copy_(x)
    if cols:
        y[:R, C:].zero_()
    if rows:
        y[R:].zero_()
    return y


def pays_to_pad(M: int, K: int, N: int, element_size: int) -> bool:
    """Whether ``[M, K] @ [N, K].T`` runs faster on operands padded to whole 16-byte rows
    (:func:`whole_row_operands`): where ``K`` or ``N`` is off them, and the time cuBLAS's slower
    kernels would take beyond the padded GEMM's exceeds the padding's cost. That cost is the copies
    of ``a`` (where ``K`` is off) and the weight, the output's columns copied back (where ``N`` is
    off), and :data:`OP_SECONDS` for each of these operations. The rates are an H200's (the
    constants above). Decode-sized GEMMs read the weight once whatever the alignment, so they stay as
    they are."""
    e, unit = element_size, ROW_UNIT_BYTES // element_size
    pad_k, pad_n = -K % unit, -N % unit
    if not (pad_k or pad_n) or M == 0:
        return False
    odd = bool(pad_k and K % 2) or bool(pad_n and N % 2)  # rows 2-byte aligned: cuBLAS's slowest kernels
    flops = 2.0 * M * K * N
    saved = flops / (ODD_ROW_FLOPS if odd else EVEN_ROW_FLOPS) - flops / ALIGNED_FLOPS
    cost = e * N * K / (PAD_BYTES_PER_S if pad_k else ROW_PAD_BYTES_PER_S) + OP_SECONDS
    if pad_k:
        cost += e * M * K / PAD_BYTES_PER_S + OP_SECONDS
    if pad_n:
        cost += e * M * N / CROP_BYTES_PER_S + OP_SECONDS
    return saved > cost


def pads_rows(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether :func:`linear_into` runs ``x @ weight.T`` on padded operands: cuBLAS's GEMMs in fp16
    or bf16 on CUDA, where :func:`pays_to_pad`."""
    return (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)
            and pays_to_pad(x.shape[0], x.shape[1], weight.shape[0], x.element_size()))


def linear_into(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                alpha: float = 1.0) -> torch.Tensor:
    """``alpha * x @ weight.T (+ bias)``, written into ``out`` when given: one cuBLAS GEMM, the bias and
    ``alpha`` in its epilogue. Where :func:`pads_rows` says so, on operands zero-padded to whole
    16-byte rows (:func:`whole_row_operands`), the padded output's columns then copied into ``out``.

    Shapes: ``x: [M, K]``, ``weight: [N, K]``, ``bias: [N]``, ``out: [M, N]``."""
    if not pads_rows(x, weight):
        return _gemm_into(out, x, weight, bias, alpha)
    N = weight.shape[0]
    xp, wp = whole_row_operands(x, weight)
    pad_n = wp.shape[0] - N
    if not pad_n:
        return _gemm_into(out, xp, wp, bias, alpha)
    wide = _gemm_into(None, xp, wp, None if bias is None else torch.nn.functional.pad(bias, (0, pad_n)), alpha)
    return first_columns(wide, N, out)


REPITCH_CROP_MIN_BYTES = 16 << 20
"""Outputs from which :func:`first_columns` crops by :mod:`fluxlite.kernels.repitch`: on an H200 host
its launch took 25 us of host time against torch's copy's 12, and its device time is half of
torch's (at 1.4-1.6e12 bytes/s against 0.7-0.9e12) from some 20 MB."""


def first_columns(wide: torch.Tensor, N: int, out: torch.Tensor | None) -> torch.Tensor:
    """``wide: [M, Np]``'s first ``N`` columns as a contiguous ``[M, N]``: copied into ``out`` where
    given, else into a new tensor (an output computed on rows padded to whole units). On CUDA, from
    :data:`REPITCH_CROP_MIN_BYTES`, by :mod:`fluxlite.kernels.repitch` (16-byte loads; torch's copy
    moves rows off 16 bytes element by element)."""
    src = wide[:, :N]
    dst = wide.new_empty((wide.shape[0], N)) if out is None else out
    large = wide.numel() * wide.element_size() >= REPITCH_CROP_MIN_BYTES
    if wide.is_cuda and large and repitch.launch(src, dst, _repitch_cache(wide.device)):
        return dst
    return dst.copy_(src)


def _repitch_cache(device: torch.device) -> dict:
    """The compiled copies of :mod:`fluxlite.kernels.repitch` on ``device``."""
    return PROCESS.repitch.setdefault(device.index, {})


def _gemm_into(out: torch.Tensor | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               alpha: float) -> torch.Tensor:
    """:func:`linear_into` on the operands as given: one cuBLAS GEMM."""
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
    y = apply_epilogue(linear_into(None, x, weight, None), ep, bias, row_scale, x.dtype)
    if out is None:
        return y
    return out.copy_(y)
