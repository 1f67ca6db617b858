"""Model presets: the AG-GEMM and GEMM-RS shapes of a transformer layer under TP with sequence
parallelism, forward and backward.

Shapes are what each rank's op sees, ``M×K→N``: AG-GEMM ``M`` gathered rows, ``K``
the hidden size, ``N`` the local output columns; GEMM-RS ``M`` rows, ``K`` the local reduction
size, ``N`` the outputs. Per layer (``tokens`` = sequence × micro-batch):

- ``qkv`` and ``fc1`` (Column): forward AG ``tokens×in→out/tp``; dgrad RS ``tokens×out/tp→in``;
  without sequence parallelism the dgrad is an AR ``tokens×out/tp→in`` (``.no_sp``; the forward is
  a local GEMM).
- ``proj`` and ``fc2`` (Row): forward RS ``tokens×in/tp→out``; dgrad AG ``tokens×out→in/tp``;
  without sequence parallelism the forward is an AR ``tokens×in/tp→out`` (the dgrad is local).

To add a model, add a :class:`ModelPreset` to :data:`PRESETS` with its hidden size, MLP width,
attention heads and key-value heads (``gated``: a SwiGLU fc1, whose weight is ``[2*ffn, hidden]``).
"""

from __future__ import annotations

from dataclasses import dataclass

OPS = ("ag_gemm", "gemm_rs", "gemm_ar")
SHORT = {"ag_gemm": "AG", "gemm_rs": "RS", "gemm_ar": "AR"}


@dataclass(frozen=True)
class Shape:
    """One op's per-rank problem ``M×K→N``; ``names``: the layer passes it serves (``fc1.fwd``)."""

    op: str
    M: int
    K: int
    N: int
    names: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{SHORT[self.op]} {self.M}x{self.K}->{self.N}"

    @property
    def flops(self) -> float:
        """The GEMM's FLOPs on each rank."""
        return 2.0 * self.M * self.K * self.N


@dataclass(frozen=True)
class ModelPreset:
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    gated: bool = True

    def layers(self) -> list[tuple[str, str, int, int]]:
        """``(name, "column" | "row", in_features, out_features)`` of the four TP linears."""
        head_dim = self.hidden // self.heads
        return [("qkv", "column", self.hidden, (self.heads + 2 * self.kv_heads) * head_dim),
                ("proj", "row", self.heads * head_dim, self.hidden),
                ("fc1", "column", self.hidden, self.ffn * (2 if self.gated else 1)),
                ("fc2", "row", self.ffn, self.hidden)]


PRESETS: dict[str, ModelPreset] = {
    "llama3-8b": ModelPreset(hidden=4096, ffn=14336, heads=32, kv_heads=8),
    "llama3-70b": ModelPreset(hidden=8192, ffn=28672, heads=64, kv_heads=8),
    "llama3-405b": ModelPreset(hidden=16384, ffn=53248, heads=128, kv_heads=8),
    "qwen2.5-72b": ModelPreset(hidden=8192, ffn=29568, heads=64, kv_heads=8),
    "gpt3-175b": ModelPreset(hidden=12288, ffn=49152, heads=96, kv_heads=96, gated=False),
}


def model_shapes(name: str, tp: int, tokens: int) -> list[Shape]:
    """The distinct op shapes of preset ``name`` at ``tp`` ranks and ``tokens`` tokens (forward and
    dgrad of each linear; a shape two passes share is listed once, with both names).

    Raises ``ValueError`` naming the size that ``tp`` does not divide."""
    preset = PRESETS[name]
    if tokens % tp:
        raise ValueError(f"--tokens ({tokens}) must be divisible by the tensor-parallel size ({tp})")
    shapes: dict[tuple, list[str]] = {}
    for layer, kind, fan_in, fan_out in preset.layers():
        sharded = fan_out if kind == "column" else fan_in
        if sharded % tp:
            raise ValueError(f"{name}: {layer} has {sharded} {'output' if kind == 'column' else 'input'} features, "
                             f"which the tensor-parallel size ({tp}) does not divide")
        if kind == "column":
            passes = [("fwd", "ag_gemm", fan_in, fan_out // tp), ("dgrad", "gemm_rs", fan_out // tp, fan_in),
                      ("dgrad.no_sp", "gemm_ar", fan_out // tp, fan_in)]
        else:
            passes = [("fwd", "gemm_rs", fan_in // tp, fan_out), ("dgrad", "ag_gemm", fan_out, fan_in // tp),
                      ("fwd.no_sp", "gemm_ar", fan_in // tp, fan_out)]
        for pass_, op, K, N in passes:
            shapes.setdefault((op, tokens, K, N), []).append(f"{layer}.{pass_}")
    return [Shape(op, M, K, N, tuple(names)) for (op, M, K, N), names in shapes.items()]
