"""``impl="decomposed"`` (per-peer point-to-point chunks overlapped with chunked matmuls) on 2 and 4
gloo ranks, against float64 references, with every epilogue, ``return_gathered`` and ``out=``.

Poisoned as in tests/test_ops_cpu.py: deterministic mode fills every ``torch.empty`` with NaN, and
half the calls pass a NaN-filled ``out=``, so a chunk that never arrived, or landed in the wrong
rows, fails. Tolerances: tests/numerics.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import fluxlite
from fluxlite import epilogue

from .dist_utils import run_ranks
from .numerics import ag_reference, check, poison_empty_tensors, randn, rs_reference

SHAPES = [(1, 3, 5), (7, 24, 40), (33, 17, 9)]  # (rows per rank, K, N): one row, ragged, odd sizes
AG_EPILOGUES = [dict(), dict(activation="gelu", scale=0.5), dict(activation="swiglu"), dict(row_scaled=True),
                dict(activation="silu", row_scaled=True)]


def _ag(rank, W, gen) -> list[str]:
    failures = []
    for (m, K, N), dtype, spec in itertools.product(SHAPES, (torch.float32, torch.bfloat16), AG_EPILOGUES):
        spec = dict(spec)
        row_scaled = spec.pop("row_scaled", False)
        a_full = randn(gen, W * m, K, dtype=dtype)
        weight = randn(gen, 2 * N if spec.get("activation") == "swiglu" else N, K, dtype=dtype)
        bias = randn(gen, weight.shape[0], dtype=dtype)
        scales_full = randn(gen, W * m, dtype=torch.float32).abs() + 0.5
        ep = epilogue.Epilogue(spec.get("activation"), row_scaled, spec.get("scale", 1.0))
        ref = epilogue.apply(ag_reference(a_full, weight, None), ep, bias.double(),
                             scales_full.double() if row_scaled else None, torch.float64)
        for gathered, use_out in ((False, False), (True, True)):
            name = f"ag W={W} r={rank} m={m} K={K} N={N} {dtype} {spec} row_scaled={row_scaled} gathered={gathered}"
            out = torch.full(ref.shape, float("nan"), dtype=dtype) if use_out else None
            res = fluxlite.ag_gemm(a_full[rank * m : (rank + 1) * m], weight, bias, impl="decomposed",
                                   return_gathered=gathered, out=out,
                                   row_scale=scales_full[rank * m : (rank + 1) * m] if row_scaled else None, **spec)
            if gathered:
                res, g = res
                if not torch.equal(g, a_full):
                    failures.append(f"{name}: the gathered input is not the rank-major concatenation")
            if out is not None and res.data_ptr() != out.data_ptr():
                failures.append(f"{name}: the result is not the out= tensor")
            check(name, res, ref, dtype, failures)
    return failures


def _rs(rank, W, gen) -> list[str]:
    failures = []
    for (mc, K, N), dtype, scale in itertools.product(SHAPES, (torch.float32, torch.bfloat16), (None, 0.25)):
        M = W * mc
        a_parts = [randn(gen, M, K, dtype=dtype) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=dtype) for _ in range(W)]
        bias = randn(gen, N, dtype=dtype)
        ref = rs_reference(a_parts, w_parts, None, rank) * (scale or 1.0) + bias.double()
        for use_out in (False, True):
            name = f"rs W={W} r={rank} M={M} K={K} N={N} {dtype} scale={scale} out={use_out}"
            out = torch.full((mc, N), float("nan"), dtype=dtype) if use_out else None
            res = fluxlite.gemm_rs(a_parts[rank], w_parts[rank], bias, impl="decomposed", out=out, scale=scale)
            if out is not None and res.data_ptr() != out.data_ptr():
                failures.append(f"{name}: the result is not the out= tensor")
            check(name, res, ref, dtype, failures)
    return failures


def _matrix(rank: int, W: int) -> None:
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(20261124)  # the same global operands on every rank
    failures = _ag(rank, W, gen) + _rs(rank, W, gen)
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 4])
def test_decomposed_matches_float64_reference(world_size):
    run_ranks(_matrix, world_size)
