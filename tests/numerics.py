"""Inputs, float64 references and tolerances shared by the CPU op tests.

Every rank draws the *global* operands from the same seed and keeps its own slice, so each rank can
compute the float64 reference of the whole op locally (the shapes here are small).

Tolerance: ``|out - ref| <= tol * (|ref| + rms(ref))`` element-wise, against a float64 reference
computed from the operands as rounded to the test dtype. The ``rms`` term keeps entries that
cancel to near zero from demanding a relative accuracy no dtype has; a lost, misplaced or doubled
chunk (or bias) is off by about ``rms(ref)`` and fails by orders of magnitude.

- fp32: ``tol = 1e-5`` (fp32 rounding of K <= ~600-term dot products is ~1e-7 of that scale).
- bf16: ``tol = 2e-2`` (bf16 keeps 8 bits: one rounding is up to 2e-3 relative. GEMM-RS rounds
  each rank's partial to bf16 before the reduction, and gloo's reduce-scatter sums bf16 in bf16,
  rounding W-1 more times: at W=4 the sequential impl reaches ~1.1e-2 on these shapes).
"""

from __future__ import annotations

import torch

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float64: 1e-12}


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Fresh N(0, 1) data (never zeros), rounded to ``dtype``."""
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)  # fp32 draws: 10x faster than fp64


def poison_empty_tensors() -> None:
    """From now on every ``torch.empty``/``new_empty`` in this process comes back NaN-filled.

    (Deterministic mode fills uninitialised memory. ``torch.use_deterministic_algorithms`` would
    also import inductor, 4 s per process; the C switch alone is what fills the memory.)
    """
    torch._C._set_deterministic_algorithms(True)
    assert torch.utils.deterministic.fill_uninitialized_memory
    assert torch.empty(1).isnan().all()


def max_violation(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """``max(|out - ref| / (tol * (|ref| + rms(ref))))``: <= 1 passes. NaN/inf in ``out`` count as failures."""
    out64 = out.to(torch.float64)
    if not torch.isfinite(out64).all():
        return float("inf")
    rms = ref.pow(2).mean().sqrt()
    bound = TOL[dtype] * (ref.abs() + rms)
    return float(((out64 - ref).abs() / bound).max()) if ref.numel() else 0.0


def check(name: str, out, ref: torch.Tensor, dtype: torch.dtype, failures: list[str]) -> None:
    """Append a line to ``failures`` unless ``out`` has ``ref``'s shape, ``dtype`` and values within tolerance."""
    if not isinstance(out, torch.Tensor):
        failures.append(f"{name}: expected a tensor, got {type(out).__name__}")
        return
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != dtype:
        failures.append(f"{name}: got {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {dtype}")
        return
    v = max_violation(out, ref, dtype)
    if not v <= 1.0:
        err = float((out.to(torch.float64) - ref).abs().max())
        failures.append(f"{name}: max |err| {err:.3g} is {v:.3g}x the tolerance ({TOL[dtype]:g} rel)")


def ag_reference(a_full: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """float64 ``a_full @ weight.T (+ bias)``; ``a_full`` is the gathered ``[W*m, K]``."""
    out = a_full.double() @ weight.double().t()
    return out + bias.double() if bias is not None else out


def rs_reference(a_parts, weight_parts, bias, rank: int) -> torch.Tensor:
    """float64 rows ``[r*M/W, (r+1)*M/W)`` of ``sum_p a_parts[p] @ weight_parts[p].T (+ bias)``."""
    total = sum(a.double() @ w.double().t() for a, w in zip(a_parts, weight_parts))
    mc = total.shape[0] // len(a_parts)
    out = total[rank * mc : (rank + 1) * mc]
    return out + bias.double() if bias is not None else out


def poison_workspace(ws) -> None:
    """Fill this rank's data halves with NaN bytes, so a chunk the protocol forgot to move shows up.

    Call only between two barriers: no peer may be inside a call on this workspace.
    """
    for parity in (0, 1):
        ws.data(ws.rank, parity, (ws.capacity,), torch.uint8).fill_(0xFF)
