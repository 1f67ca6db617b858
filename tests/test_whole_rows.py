"""GEMMs on rows off 16 bytes: cuBLAS runs slow kernels where ``K`` or ``N`` is off a multiple of 8
(bf16/fp16), so the reference implementations' GEMM (``fluxlite._sequential.linear_into``) pads
the operands to whole 16-byte rows where that pays (``pays_to_pad``) and copies the output's columns
back. Checked: the rule (large GEMMs off 16 bytes only); the padded path against a float64
reference with the output poisoned first, on CPU (the rule forced, since it pads on CUDA only) and on
one GPU; and every op's ``sequential`` and ``decomposed`` at padded shapes on two GPU ranks against
float32. Tolerances: fp32 1e-5, bf16/fp16 1e-2 relative error of the norm (products over ``K``)."""

from __future__ import annotations

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
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(dev).manual_seed(11)  # every rank draws every rank's operands alike
    for op, M, K, N in (("ag_gemm", 2048 * W, 3001, 2000), ("gemm_rs", 2048 * W, 4099, 2001),
                        ("gemm_ar", 3001, 2049, 3003)):
        a_all = torch.randn(W, M // W if op == "ag_gemm" else M, K, device=dev, generator=gen).to(torch.bfloat16)
        w_all = (torch.randn(W, N, K, device=dev, generator=gen) / K**0.5).to(torch.bfloat16)
        if op == "ag_gemm":
            w_all[:] = w_all[0]  # one weight: the column shard is every rank's own in a layer, alike here
            ref = torch.cat(list(a_all)).float() @ w_all[0].float().t()
        else:
            partials = torch.stack([a_all[q].float() @ w_all[q].float().t() for q in range(W)]).sum(0)
            ref = partials.chunk(W)[rank] if op == "gemm_rs" else partials
        for impl in ("sequential", "decomposed"):
            out = torch.full(ref.shape, float("nan"), device=dev, dtype=torch.bfloat16)
            res = getattr(fluxlite, op)(a_all[rank], w_all[rank], impl=impl, out=out)
            assert res is out and rel_err(res, ref) < 1e-2, (op, impl, rel_err(res, ref))


@pytest.mark.gpu
def test_the_reference_impls_pad_their_gemms_on_two_gpu_ranks():
    run_gpu_ranks(_reference_impls_pad, 2)

