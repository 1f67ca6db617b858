"""GEMMs on rows off 16 bytes: cuBLAS runs slow kernels where ``K`` or ``N`` is off a multiple of 8
(bf16/fp16), so the reference implementations' GEMM (``fluxlite._sequential.linear_into``) pads
the operands to whole 16-byte rows where that pays (``pays_to_pad``) and copies the output's columns
back. Checked: the rule (large GEMMs off 16 bytes only); the padded path against a float64
reference with the output poisoned first, on CPU (the rule forced, since it pads on CUDA only) and on
one GPU; every op's ``sequential`` and ``decomposed`` at padded shapes on two GPU ranks against
float32; and GEMM-RS's and GEMM-AllReduce's fused calls on whole output rows (the weight padded to
them, the output's columns copied back), on gloo ranks and on the GPU. Tolerances: fp32 1e-5,
bf16/fp16 1e-2 relative error of the norm (products over ``K``)."""

from __future__ import annotations

import os

import pytest
import torch

import fluxlite
from fluxlite import _sequential
from fluxlite._sequential import linear_into, pays_to_pad

from .gpu_utils import rel_err, run_gpu_ranks


@pytest.mark.parametrize("M,K,N,e,pads", [
    (4096, 3001, 2000, 2, True),     # K off: 0.44 ms unpadded against 0.14 with the copies (H200)
    (8192, 5000, 3500, 2, True),     # N off
    (4096, 2048, 2001, 2, True),
    (8, 3001, 2000, 2, False),       # decode-sized: the weight's copy costs more than it saves
    (256, 3001, 2000, 2, False),
    (8192, 8192, 14336, 2, False),   # whole rows already
    (2048, 4097, 7000, 4, True),     # fp32: rows of 4 elements
    (0, 3001, 2000, 2, False),
])
def test_the_rule_pads_large_gemms_off_16_bytes_only(M, K, N, e, pads):
    assert pays_to_pad(M, K, N, e) is pads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("K,N", [(13, 7), (16, 7), (13, 8), (24, 5)])
@pytest.mark.parametrize("bias,into,kmajor", [(False, False, False), (True, True, False), (True, False, True),
                                              (False, True, True)])
def test_the_padded_gemm_matches_float64(monkeypatch, dtype, K, N, bias, into, kmajor):
    monkeypatch.setattr(_sequential, "pads_rows", lambda x, w: True)
    M, alpha = 11, 0.75
    x = torch.randn(M, K).to(dtype)
    w = torch.randn(K, N).to(dtype).t() if kmajor else torch.randn(N, K).to(dtype)  # a backward's W.t()
    b = torch.randn(N).to(dtype) if bias else None
    out = torch.full((M, N), float("nan"), dtype=dtype) if into else None
    got = linear_into(out, x, w, b, alpha)
    assert got.shape == (M, N) and got.is_contiguous() and (out is None or got is out)
    ref = alpha * (x.double() @ w.double().t()) + (b.double() if bias else 0)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(got, ref) < tol


@pytest.mark.gpu
def test_the_padded_gemm_on_one_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gen = torch.Generator("cuda").manual_seed(7)
    for M, K, N, dtype in ((4096, 3001, 2000, torch.bfloat16), (3000, 2048, 2001, torch.float16),
                           (2500, 4099, 3003, torch.bfloat16)):
        x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
        w = (torch.randn(N, K, device="cuda", generator=gen) / K**0.5).to(dtype)
        b = torch.randn(N, device="cuda", generator=gen).to(dtype)
        assert _sequential.pads_rows(x, w), (M, K, N)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        linear_into(out, x, w, b, 0.5)
        ref = 0.5 * (x.float() @ w.float().t()) + b.float()
        assert rel_err(out, ref) < 1e-2, (M, K, N, rel_err(out, ref))


def _reference_impls_pad(rank: int, W: int) -> None:
    import importlib

    from fluxlite.ops import AR, RS

    module = importlib.import_module("fluxlite.ops.gemm_rs")
    padded, expected, zero_padded = [], [], module.zero_padded  # GEMM-RS's fused calls' weight padding, counted
    module.zero_padded = lambda x, rows, cols: (rows and padded.append(rows)) or zero_padded(x, rows, cols)
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(dev).manual_seed(11)  # every rank draws every rank's operands alike
    for op, M, K, N in (("ag_gemm", 2048 * W, 3001, 2000), ("gemm_rs", 2560 * W, 4099, 2001),
                        ("gemm_ar", 3001, 2049, 3003), ("gemm_rs", 1536 * W, 4096, 3501),
                        ("ag_gemm", 2048 * W, 4096, 3501)):
        a_all = torch.randn(W, M // W if op == "ag_gemm" else M, K, device=dev, generator=gen).to(torch.bfloat16)
        w_all = (torch.randn(W, N, K, device=dev, generator=gen) / K**0.5).to(torch.bfloat16)
        if op == "ag_gemm":
            w_all[:] = w_all[0]  # one weight: the column shard is every rank's own in a layer, alike here
            ref = torch.cat(list(a_all)).float() @ w_all[0].float().t()
        else:
            partials = torch.stack([a_all[q].float() @ w_all[q].float().t() for q in range(W)]).sum(0)
            ref = partials.chunk(W)[rank] if op == "gemm_rs" else partials
        reducing = {"gemm_rs": RS, "gemm_ar": AR}.get(op)
        if reducing is not None and not reducing.one_shot(W, M, N, 2):  # its fused calls on whole output rows
            expected += [-N % 8] * 3
        for impl in ("sequential", "decomposed", "fused", "fused", "fused"):  # the fused repeats replayed
            out = torch.full(ref.shape, float("nan"), device=dev, dtype=torch.bfloat16)
            res = getattr(fluxlite, op)(a_all[rank], w_all[rank], impl=impl, out=out)
            assert res is out and rel_err(res, ref) < 1e-2, (op, impl, rel_err(res, ref))
    assert padded == expected and len(expected) == 9, padded  # GEMM-RS's and GEMM-AllReduce's; not AG-GEMM's


@pytest.mark.gpu
def test_the_reference_impls_pad_their_gemms_on_two_gpu_ranks():
    run_gpu_ranks(_reference_impls_pad, 2)


def _on_whole_output_rows(rank: int, W: int, op: str) -> None:
    """GEMM-RS's or GEMM-AllReduce's (two shots) fused call with output rows off whole units (fp32 on
    CPU: ``N`` off 4), padded as on CUDA (``GemmReduceScatter.whole_output_rows``; the padding is
    counted, so a path that skips it fails): against float64, into a poisoned ``out`` and into a fresh
    one, twice each (the second a repeat), with a bias and a scale."""
    import importlib

    from fluxlite.ops import AR, RS

    module = importlib.import_module("fluxlite.ops.gemm_rs")  # fluxlite.ops.gemm_rs is the op's function
    ar = op == "gemm_ar"
    if ar:
        importlib.import_module("fluxlite.ops.gemm_ar").ONE_SHOT_MAX_BYTES = 0  # two shots, the second a gather
    assert RS.output_columns(8, 8, 7, 4) == 7  # a small GEMM: the padding would cost more than it saves
    module.pays_to_pad = lambda M, K, N, e: True  # this rank's process only: small shapes on CUDA's path
    module.GemmReduceScatter.pads_output_rows = lambda self, state: True
    assert RS.output_columns(8, 8, 7, 4) == 8 and RS.output_columns(8, 9, 7, 4) == 8  # K off too: both padded
    padded, expected, zero_padded = [], [], module.zero_padded
    module.zero_padded = lambda x, rows, cols: padded.append((rows, cols)) or zero_padded(x, rows, cols)
    triton_k = os.environ.get("FLUXLITE_CPU_CONSUMER") == "triton"  # K off: padded for the kernel's TMA too
    gen = torch.Generator().manual_seed(5 + W)
    shapes = ((4 * W, 8, 7), (6 * W, 12, 13), (2 * W, 4, 1), (6 * W, 9, 5))
    for M, K, N in shapes + (((3 * W + 1, 9, 6), (1, 4, 7)) if ar else ()):  # rows off the ranks; one row
        a_all = torch.randn(W, M, K, generator=gen)
        w_all = torch.randn(W, N, K, generator=gen)
        bias = torch.randn(N, generator=gen)
        ref = 0.5 * sum(a_all[q].double() @ w_all[q].double().t() for q in range(W))
        ref = (ref if ar else ref.chunk(W)[rank]) + bias.double()
        padded_call = ar or not RS.one_shot(W, M, N, 4)  # a one-shot call runs cuBLAS on the rows as given
        k_pad = -K % 32 if triton_k and K % 4 else 0  # fp32: rows of K off 16 bytes, padded to 128
        # a padded call: the weight's copy pads N and K at once, and a's copy (K off) pads K alike
        expected += 4 * padded_call * ([(-N % 4, k_pad)] + ([(0, k_pad)] if k_pad else []))
        for into in (True, False, True, False):
            out = torch.full(ref.shape, float("nan")) if into else None
            res = getattr(fluxlite, op)(a_all[rank], w_all[rank], bias, impl="fused", out=out, scale=0.5)
            assert res.shape == ref.shape and res.is_contiguous() and (out is None or res is out)
            assert rel_err(res, ref) < 1e-5, (op, M, K, N, into, rel_err(res, ref))
    assert AR.output_columns(8, 8, 7, 4) == 8  # the op's own rule: GEMM-AllReduce's is GEMM-RS's
    assert sorted(padded) == sorted(expected) and expected, padded  # every call that is not one shot padded


@pytest.mark.parametrize("op", ["gemm_rs", "gemm_ar"])
def test_fused_on_whole_output_rows(op):
    from .dist_utils import run_ranks

    run_ranks(_on_whole_output_rows, 2, op)
    run_ranks(_on_whole_output_rows, 3, op)
    run_ranks(_on_whole_output_rows, 4, op)
    # the Triton kernel as the consumer (interpreted): the output's padding and K's for TMA together
    run_ranks(_on_whole_output_rows, 2, op, env={"FLUXLITE_CPU_CONSUMER": "triton"})
