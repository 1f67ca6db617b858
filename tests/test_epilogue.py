"""The fused epilogue (:mod:`fluxlite.epilogue`): ``act(scale * row_scale * acc + bias)``, SwiGLU on a
gate/up weight, in the GEMM core (interpreter), in every impl of AG-GEMM (the row scales travel with
the gathered rows, pushed or pulled) and GEMM-RS's scale, against float64 references; and its
argument checks.

Tolerances: see tests/numerics.py (fp32 1e-5, bf16 2e-2 relative to ``|ref| + rms(ref)``); the
kernel tests use the interpreter's (tests/test_kernels.py).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import fluxlite
from fluxlite import epilogue as E
from fluxlite.kernels import ag_gemm as ag_kern
from fluxlite.kernels import gemm_core as core

from .dist_utils import run_ranks
from .numerics import check, poison_empty_tensors, randn

ACTS = E.ACTIVATIONS


def _reference(x: torch.Tensor, w: torch.Tensor, ep: E.Epilogue, bias, row_scale) -> torch.Tensor:
    """float64 ``ep(x @ w.T)``."""
    return E.apply(x.double() @ w.double().t(), ep, None if bias is None else bias.double(),
                   None if row_scale is None else row_scale.double(), torch.float64)


def _operands(gen, rows: int, K: int, n_out: int, act, dtype):
    w = randn(gen, 2 * n_out if act == "swiglu" else n_out, K, dtype=dtype)
    return w, randn(gen, w.shape[0], dtype=dtype)


# ---- the kernel's epilogue (interpreter) -----------------------------------------------------------


@pytest.mark.skipif(not core.interpreting(), reason="interpreter test (GPU: tests/test_gpu_fused.py)")
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("M,K,N", [(70, 64, 48), (33, 40, 21)], ids=["tma", "pointers"])
def test_kernel_epilogue(act, M, K, N):
    g = torch.Generator().manual_seed(M + K + N + ACTS.index(act))
    a = randn(g, M, K, dtype=torch.float32)
    w, bias = _operands(g, M, K, N, act, torch.float32)
    row_scale = torch.rand(M, generator=g) + 0.5
    ep = E.Epilogue(act, True, 0.75)
    out = torch.full((M, N), float("nan"))
    assert core.tma_ok(a, out, w) == (M == 70)
    ag_kern.gemm(a, w, bias, ep=ep, row_scale=row_scale, out=out)
    failures: list[str] = []
    check(f"kernel {act}", out, _reference(a, w, ep, bias, row_scale), torch.float32, failures)
    assert not failures, failures


# ---- the ops on gloo ranks ----------------------------------------------------------------------


_ROW_SCALE_BIAS = list(itertools.product((False, True), (False, True)))


def _ops_cases(rank: int, W: int, impls: tuple[str, ...], dtypes, every_combination: bool = True) -> None:
    """Every shape, dtype, activation and impl, pushed and pulled. ``every_combination``: each of
    those with and without row scales and bias; otherwise one of the four row-scale/bias options
    per case, chosen so that every activation meets each option of each, on push and on pull."""
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(1234 + W)  # the same global operands on every rank
    failures: list[str] = []
    shapes = [(1, 8, 5), (37, 24, 19), (130, 16, 12)]
    for ((i, (m, K, N)), dtype, (j, act)) in itertools.product(enumerate(shapes), dtypes, enumerate(ACTS)):
        a_full = randn(gen, W * m, K, dtype=dtype)
        w, bias = _operands(gen, m, K, N, act, dtype)
        scales_full = torch.rand(W * m, generator=gen) + 0.5
        a, scales = a_full[rank * m : (rank + 1) * m], scales_full[rank * m : (rank + 1) * m]
        for impl, gathered, with_scales, with_bias in itertools.product(impls, (False, True), (False, True),
                                                                          (False, True)):
            # three consecutive options (one per shape) hold each value of row_scale and of bias
            if not every_combination and (with_scales, with_bias) != _ROW_SCALE_BIAS[(i + j + 2 * gathered) % 4]:
                continue
            ep = E.Epilogue(act, with_scales, -1.5 if with_bias else 1.0)
            b = bias if with_bias else None
            rs = scales if with_scales else None
            name = (f"ag_gemm W={W} r={rank} m={m} K={K} N={N} {dtype} act={act} row_scale={with_scales} "
                    f"bias={with_bias} impl={impl} gathered={gathered}")
            res = fluxlite.ag_gemm(a, w, b, impl=impl, return_gathered=gathered, activation=act, row_scale=rs,
                                   scale=ep.scale)
            if gathered:
                res, g = res
                if not torch.equal(g, a_full):
                    failures.append(f"{name}: gathered input differs")
            check(name, res, _reference(a_full, w, ep, b, None if rs is None else scales_full), dtype, failures)
    # GEMM-RS: scale * sum + bias
    for impl, dtype in itertools.product(impls, dtypes):
        M, K, N = 2 * W * 9, 20, 17
        a_parts = [randn(gen, M, K, dtype=dtype) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=dtype) for _ in range(W)]
        bias = randn(gen, N, dtype=dtype)
        total = sum(x.double() @ y.double().t() for x, y in zip(a_parts, w_parts))
        ref = (0.5 * total + bias.double())[rank * M // W : (rank + 1) * M // W]
        out = fluxlite.gemm_rs(a_parts[rank], w_parts[rank], bias, impl=impl, scale=0.5)
        check(f"gemm_rs W={W} scale=0.5 {dtype} impl={impl}", out, ref, dtype, failures)
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world_size", [2, 3])
def test_ops_epilogues_match_float64(world_size):
    run_ranks(_ops_cases, world_size, ("sequential", "fused"), (torch.float32, torch.bfloat16))


@pytest.mark.timeout(180)
@pytest.mark.skipif(not core.interpreting(), reason="interpreter test")
def test_ops_epilogues_with_the_kernel_as_consumer():
    """The epilogue through the fused ops with the interpreted kernel as the consumer (a quarter of the
    torch consumer's cases, since an interpreted launch is slow)."""
    run_ranks(_ops_cases, 2, ("fused",), (torch.float32,), False, env={"FLUXLITE_CPU_CONSUMER": "triton"})


# ---- argument checks ----------------------------------------------------------------------------


def _bad_args(rank: int, W: int) -> None:
    a, w = torch.randn(4, 8), torch.randn(6, 8)
    cases = [
        (ValueError, "activation must be one of", dict(activation="relu")),
        (ValueError, "which is odd", dict(weight=torch.randn(5, 8), activation="swiglu")),
        (ValueError, r"row_scale must be 1-D \[4\]", dict(row_scale=torch.ones(5))),
        (TypeError, "row_scale.dtype must be torch.float32", dict(row_scale=torch.ones(4, dtype=torch.float64))),
        (TypeError, "row_scale must be a torch.Tensor", dict(row_scale=[1.0] * 4)),
        (TypeError, "scale must be a float", dict(scale="2")),
        (ValueError, "scale must be finite", dict(scale=float("inf"))),
        (ValueError, r"out must have shape \(8, 3\)", dict(activation="swiglu", out=torch.empty(8, 6))),
    ]
    for exc, match, kw in cases:
        kw = dict(kw)
        weight = kw.pop("weight", w)
        with pytest.raises(exc, match=match):
            fluxlite.ag_gemm(a, weight, impl="fused", **kw)
    with pytest.raises(TypeError, match="scale must be a float"):
        fluxlite.gemm_rs(torch.randn(4, 8), w, scale=True)
    # Nothing was sent: a good call still works on both ranks.
    out = fluxlite.ag_gemm(a, w, impl="fused", activation="silu")
    assert out.shape == (W * 4, 6)


def test_bad_epilogue_arguments_raise_before_any_communication():
    run_ranks(_bad_args, 2)


def _row_scale_mismatch(rank: int, W: int) -> None:
    a, w = torch.randn(40, 8), torch.randn(6, 8)
    fluxlite.ag_gemm(a, w, impl="fused")  # the workspace exists: no growth to tell the ranks apart
    rs = torch.ones(40) if rank == 0 else None
    with pytest.raises(fluxlite.FluxliteCallMismatchError, match="row_scale"):
        fluxlite.ag_gemm(a, w, impl="fused", row_scale=rs)


def test_ranks_that_disagree_on_row_scale_raise_a_mismatch():
    run_ranks(_row_scale_mismatch, 2, timeout_s=10.0)

