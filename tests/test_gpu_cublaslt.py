"""``fluxlite._cublaslt.addmm_into`` (``d = alpha * a @ w.T + c + bias``, ``c`` and ``d`` apart, or no
``c``, with or without a bias) against float32 torch, on one GPU, at random shapes and layouts: row
views with a leading dimension over the width (the matmul consumer's splits of ``recv`` and
``out``), a weight as ``nn.Linear`` keeps it or as a backward passes it (``W.t()``), odd sizes that
cuBLASLt may refuse and a bias off 256 bytes (then it must enqueue nothing and say so), and inside a
CUDA graph, whose replay keeps the bias it was captured with; and no memset before the GEMM (no
workspace). Tolerance: 1e-2 relative error of the norm (bf16/fp16 products over K, as
tests/test_gpu_fused.py); ``c`` must come back bit for bit.
"""

from __future__ import annotations

import random

import pytest
import torch

pytestmark = pytest.mark.gpu


def _skip_without_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


def _case(rng: random.Random, gen: torch.Generator):
    dtype = rng.choice((torch.bfloat16, torch.float16))
    M, N = rng.choice((1, 7, 64, 129, rng.randint(1, 3000))), rng.choice((8, 64, rng.randint(1, 2500)))
    K = rng.choice((64, 8 * rng.randint(1, 400), rng.randint(1, 2000)))
    pad = rng.choice((0, 0, 8, 3))  # leading dimensions over the width
    base = torch.randn(M, K + pad, generator=gen, device="cuda").to(dtype)
    a = base[:, :K]
    if rng.random() < 0.3:
        w = (torch.randn(K, N, generator=gen, device="cuda") / K**0.5).to(dtype).t()  # a backward's W.t()
    else:
        w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).to(dtype)
    c = torch.randn(2, M, N + pad, generator=gen, device="cuda").to(dtype)[1, :, :N]  # a recv[p] row view
    d = torch.full((M, N + pad), float("nan"), device="cuda", dtype=dtype)[:, :N]
    alpha = rng.choice((1.0, 0.5, 2.0))
    bias = rng.choice((None, "aligned", "off 256 bytes", "off 16 bytes"))
    if bias is not None:  # a view 16 bytes or one element in
        start = {"aligned": 0, "off 256 bytes": 8, "off 16 bytes": 1}[bias]
        bias = torch.randn(N + 8, generator=gen, device="cuda").to(dtype)[start : start + N]
    return a, w, c, d, alpha, bias


def test_addmm_into_matches_float32_at_random_shapes_and_layouts():
    _skip_without_cuda()
    from fluxlite._cublaslt import addmm_into

    rng, gen = random.Random(7), torch.Generator(device="cuda").manual_seed(7)
    ran = biased = 0
    for _ in range(120):  # a bias in three of four, off 256 bytes in two of those three: refused
        a, w, c, d, alpha, bias = _case(rng, gen)
        c_before = c.clone()
        with_c = rng.random() < 0.7
        took = addmm_into(d, c if with_c else None, a, w, alpha, bias=bias)
        if bias is not None and bias.data_ptr() % 256:
            assert not took, "a bias off 256 bytes was taken"
        if not took:
            torch.cuda.synchronize()
            assert d.isnan().all(), "a refused call wrote its output"
            continue
        ran += 1
        biased += bias is not None
        ref = alpha * (a.float() @ w.float().t()) + (c.float() if with_c else 0) + (0 if bias is None else bias.float())
        torch.cuda.synchronize()
        assert torch.equal(c, c_before), "C was written"
        err = ((d.float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (a.shape, w.shape, w.stride(), c.stride(), alpha, bias is not None, err)
    assert ran >= 40 and biased >= 15, f"cuBLASLt took only {ran} of 120 cases, {biased} with a bias"


def test_addmm_into_replays_from_a_cuda_graph():
    _skip_without_cuda()
    from fluxlite._cublaslt import addmm_into

    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(512, 1024, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(768, 1024, generator=gen, device="cuda") / 32).bfloat16()
    c = torch.randn(512, 768, generator=gen, device="cuda").bfloat16()
    d = torch.empty_like(c)
    bias, other_bias = (torch.randn(768, generator=gen, device="cuda").bfloat16() for _ in range(2))
    assert addmm_into(d, c, a, w, 1.0, bias=bias)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        assert addmm_into(d, c, a, w, 0.5, bias=bias)
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    scratch = torch.empty_like(d)
    for _ in range(2):
        # The same plan with another bias, between capture and replay: the plan's descriptor now
        # holds the other pointer, the captured kernel still its own
        assert addmm_into(scratch, c, a, w, 0.5, bias=other_bias)
        a.copy_(torch.randn(512, 1024, generator=gen, device="cuda"))
        c.copy_(torch.randn(512, 768, generator=gen, device="cuda"))
        d.fill_(float("nan"))
        graph.replay()
        ref = 0.5 * (a.float() @ w.float().t()) + c.float() + bias.float()
        torch.cuda.synchronize()
        assert ((d.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_addmm_into_launches_nothing_but_the_gemm():
    """No workspace: the GEMM is the only kernel (with one, cuBLAS clears its tile scheduler's
    counters with a memset first), at shapes where torch's own call does memset."""
    _skip_without_cuda()
    from torch.profiler import ProfilerActivity, profile

    from fluxlite._cublaslt import addmm_into

    gen = torch.Generator(device="cuda").manual_seed(5)
    for M, K, N in ((2048, 4096, 8192), (3072, 6976, 5184)):
        a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
        w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
        d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        for bias in (None, torch.randn(N, generator=gen, device="cuda").bfloat16()):  # a bias: in the epilogue
            assert addmm_into(d, None, a, w, 1.0, bias=bias)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                assert addmm_into(d, None, a, w, 1.0, bias=bias)
                torch.cuda.synchronize()
            names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
            assert len(names) == 1 and "Memset" not in names[0], (M, K, N, bias is not None, names)
            ref = a.float() @ w.float().t() + (0 if bias is None else bias.float())
            assert ((d.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_a_plan_takes_the_candidate_that_preferred_names():
    """At GEMM-RS split shapes (``[rows, K] @ [N, K].T``), a ``rows_256`` plan's algorithm is the
    heuristic's second where its first two are the 256x128 and 128x256 tiles, else its first, and a
    plain plan's is the first; either way the result matches float32."""
    _skip_without_cuda()
    from fluxlite import _cublaslt as lt

    gen = torch.Generator(device="cuda").manual_seed(23)
    paired = 0
    for M, K, N in ((1024, 14336, 4096), (2048, 7168, 4096), (1024, 6144, 12288), (2048, 6424, 13968),
                    (1536, 11832, 7184), (2048, 5000, 3000)):
        a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
        w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
        ref = a.float() @ w.float().t()
        for rows_256 in (True, False):
            d = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert lt.addmm_into(d, None, a, w, 1.0, rows_256)
            key, plan = next((key, p) for (dev, key), p in lt._plans.items()
                             if key[1:4] == (M, N, K) and key[-2] == rows_256 and not key[-1] and p is not None)
            handle, desc, *layouts, algo = plan
            first_two = lt._candidates(lt._library(), handle, desc, layouts, key[-3])
            tiles = [lt._tile(lt._library(), x) for x in first_two]
            assert tiles[0] is not None, "this cuBLASLt reports no tile"
            want = first_two[lt.preferred(tiles) if rows_256 else 0]
            assert list(algo) == list(want), (M, K, N, tiles, rows_256)
            paired += rows_256 and lt.preferred(tiles)
            torch.cuda.synchronize()
            assert ((d.float() - ref).norm() / ref.norm()).item() < 1e-2
    print(f"{paired} of 6 shapes took the heuristic's second")
