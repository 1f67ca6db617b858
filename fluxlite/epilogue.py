"""The fused epilogue: what a GEMM applies to its fp32 accumulator before the output cast.

Math (per output row ``i`` and column ``n``; ``acc = A @ W.T`` in fp32)::

    y[i, n] = act(scale * row_scale[i] * acc[i, n] + bias[n])

applied in that order (row scale, bias, activation), then cast to the output dtype. ``act``:

* ``None``: identity;
* ``"gelu"``: ``x * Φ(x)`` (erf form, ``torch.nn.functional.gelu``);
* ``"gelu_tanh"``: the tanh approximation (``gelu(x, approximate="tanh")``);
* ``"silu"``: ``x * sigmoid(x)``;
* ``"swiglu"``: the weight is ``[2*N', K]``, gate rows then up rows (Megatron's local fc1 layout with
  ``gated_linear_unit``); ``y[:, n] = silu(z[:, n]) * z[:, N' + n]`` where ``z`` is the pre-activation
  above (bias included), so the output has ``N'`` columns.

``row_scale`` is per row of ``a`` on the rank that owns the row (AG-GEMM gathers it with the rows:
the deferred norm's ``1/sigma``). The GPU kernels apply the same function
(:func:`fluxlite.kernels.gemm_core.epilogue`); :func:`apply` is its torch form on an accumulator
(the test reference, and the row-scaled torch paths), and :func:`activate_into` the activation
alone on a GEMM's output that already holds the scale and the bias (the other torch paths: one
cuBLAS GEMM, then one elementwise pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ACTIVATIONS = (None, "gelu", "gelu_tanh", "silu", "swiglu")
# The kernels' constexpr code of each activation (fluxlite.kernels.gemm_core.activate).
ACTIVATION_CODES = {None: 0, "gelu": 1, "gelu_tanh": 2, "silu": 3, "swiglu": 4}


@dataclass(frozen=True)
class Epilogue:
    """The epilogue options of one call (hashable: part of a call plan's key)."""

    activation: str | None = None
    row_scaled: bool = False
    scale: float = 1.0

    @property
    def gated(self) -> bool:
        """The weight holds gate and up halves; the output has half its rows as columns."""
        return self.activation == "swiglu"

    @property
    def code(self) -> int:
        return ACTIVATION_CODES[self.activation]

    def out_features(self, weight_rows: int) -> int:
        return weight_rows // 2 if self.gated else weight_rows


PLAIN = Epilogue()


def check(op: str, *, activation, row_scale, scale, rows: int, weight_rows: int, like: torch.Tensor) -> Epilogue:
    """Validate the epilogue arguments of ``op`` (before any communication) and return their spec.

    ``rows``: rows of ``a`` on this rank (``row_scale`` must be ``[rows]``); ``weight_rows``: the
    weight's ``N`` (even for ``"swiglu"``); ``like``: ``a``, for the device.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if activation == "swiglu" and weight_rows % 2:
        raise ValueError(
            f"{op}: activation='swiglu' needs a weight of 2*N' rows (gate rows, then up rows), "
            f"got weight.shape[0] = {weight_rows}, which is odd"
        )
    if scale is None:
        scale = 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"{op}: scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"{op}: scale must be finite, got {scale!r}")
    if row_scale is not None:
        if not isinstance(row_scale, torch.Tensor):
            raise TypeError(f"{op}: row_scale must be a torch.Tensor or None, got {type(row_scale).__name__}")
        if row_scale.dim() != 1 or row_scale.shape[0] != rows:
            raise ValueError(f"{op}: row_scale must be 1-D [{rows}] (a.shape[0]), got shape {tuple(row_scale.shape)}")
        if row_scale.dtype != torch.float32:
            raise TypeError(f"{op}: row_scale.dtype must be torch.float32, got {row_scale.dtype}")
        if row_scale.device != like.device:
            raise ValueError(f"{op}: row_scale must be on a's device ({like.device}), got {row_scale.device}")
    return Epilogue(activation, row_scale is not None, float(scale))


def apply(acc: torch.Tensor, ep: Epilogue, bias: torch.Tensor | None, row_scale: torch.Tensor | None,
          out_dtype: torch.dtype) -> torch.Tensor:
    """The epilogue on a ``[rows, N]`` accumulator (any float dtype; computed in fp32, or fp64 for
    fp64) -> ``[rows, N or N/2]`` in ``out_dtype``. ``row_scale: [rows]`` or ``None``."""
    y = acc.to(torch.promote_types(acc.dtype, torch.float32))
    if ep.scale != 1.0:
        y = y * ep.scale
    if row_scale is not None:
        y = y * row_scale.to(y.dtype)[:, None]
    if bias is not None:
        y = y + bias.to(y.dtype)
    if ep.activation == "gelu":
        y = F.gelu(y)
    elif ep.activation == "gelu_tanh":
        y = F.gelu(y, approximate="tanh")
    elif ep.activation == "silu":
        y = F.silu(y)
    elif ep.activation == "swiglu":
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    return y.to(out_dtype)


def activate_into(out: torch.Tensor | None, z: torch.Tensor, activation: str | None) -> torch.Tensor:
    """``act(z)`` for a pre-activation ``z: [rows, N]`` in its output dtype (``[rows, 2N']`` for SwiGLU:
    gate columns, then up columns; the result ``[rows, N']``), into ``out`` (``None``: in place in
    ``z``, or a new tensor for SwiGLU): the epilogue's last step after a GEMM that applied the scale
    and the bias, with no fp32 copy of the output. Torch's elementwise kernels compute in fp32 and
    round once; SwiGLU rounds the gate's SiLU (taken in place in ``z``) before the product."""
    if activation is None:
        return z if out is None else out.copy_(z)
    if activation == "swiglu":
        gate, up = z.chunk(2, dim=-1)
        F.silu(gate, inplace=True)
        return gate * up if out is None else torch.mul(gate, up, out=out)
    if out is None:
        out = z
    if activation == "silu":
        return torch.ops.aten.silu.out(z, out=out)
    return torch.ops.aten.gelu.out(z, approximate="tanh" if activation == "gelu_tanh" else "none", out=out)
