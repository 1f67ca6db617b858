"""The fused implementations: one module per op (its plan, producer program, CPU consumer and GPU
launch), on top of :mod:`fluxlite.fused.call` (epochs, call agreement, joining and raising)."""

from .ag_gemm import ag_gemm
from .gemm_rs import gemm_rs

__all__ = ["ag_gemm", "gemm_rs"]
