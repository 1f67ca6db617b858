"""GEMM-AllReduce on GPU ranks: fused against a float32 reference at random shapes (M = 1 and M not a
multiple of the ranks among them; unaligned K and N; bf16 and fp16; bias and scale), eagerly, as
an eager call repeated (the eager replay path), and replayed from a captured CUDA graph; the
one-shot path (decode sizes) at random small M, and its output the same to the bit on every rank;
two shots on whole output rows at random shapes with ``N`` off a multiple of 8.
Outputs are poisoned (NaN) before every call. Tolerance: bf16/fp16 output of an fp32-accumulated
product with each rank's partial rounded to the input dtype before the reduction, against float32:
2e-2 norm-relative."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from .gpu_utils import dev, rel_err, run_gpu_ranks

pytestmark = pytest.mark.gpu
TOL = 2e-2


def _shapes(seed: int, n: int) -> list[tuple[int, int, int, torch.dtype]]:
    rng = random.Random(seed)
    fixed = [(1, 4096, 4096, torch.bfloat16), (7, 1000, 3000, torch.float16), (8192, 4096, 8192, torch.bfloat16),
             (12001, 1000, 7880, torch.float16)]  # the last two: two shots with tapered splits
    rand = [(rng.choice([1, 3, 64, 255, 1000, rng.randint(1, 5000)]), rng.choice([256, 1000, 2056, 4096]),
             rng.choice([128, 1000, 3000, 5120]), rng.choice([torch.bfloat16, torch.float16])) for _ in range(n)]
    return fixed + rand


def _one_shot_shapes(seed: int, n: int) -> list[tuple[int, int, int, torch.dtype]]:
    """Decode sizes: M in 1..256 (1 and 256 always), K and N aligned or not."""
    rng = random.Random(seed)
    fixed = [(1, 4096, 8192, torch.bfloat16), (256, 2048, 8192, torch.bfloat16), (5, 1000, 3000, torch.float16)]
    rand = [(rng.randint(1, 256), rng.choice([256, 1000, 2056, 4096, rng.randint(16, 5000)]),
             rng.choice([128, 1000, 3000, 5120, 8192, rng.randint(1, 9000)]),
             rng.choice([torch.bfloat16, torch.float16])) for _ in range(n)]
    return fixed + rand


def _whole_rows_shapes(seed: int, n: int) -> list[tuple[int, int, int, torch.dtype]]:
    """Two shots on whole output rows (``GemmReduceScatter.whole_output_rows``): ``N`` off a multiple
    of 8, ``K`` (per rank) any, GEMMs large enough to pad, ``M`` odd or even."""
    from fluxlite.ops import AR

    rng, shapes = random.Random(seed), []
    while len(shapes) < n:
        M, K, N = rng.randint(1200, 9000), rng.randint(300, 5000), rng.randint(1000, 9000)
        if N % 8 and not AR.one_shot(2, M, N, 2) and AR.output_columns(M, K, N, 2) > N:
            shapes.append((M, K, N, rng.choice([torch.bfloat16, torch.float16])))
    return shapes


def _eager(rank: int, W: int, seed: int, one_shot: bool = False, whole_rows: bool = False) -> None:
    import fluxlite
    from fluxlite.ops import AR

    failures = []
    shapes = _one_shot_shapes if one_shot else _whole_rows_shapes if whole_rows else _shapes
    for M, K, N, dtype in shapes(seed, 8 if not whole_rows else 6):
        if one_shot and not AR.one_shot(W, M, N, dtype.itemsize):
            failures.append(f"M={M} N={N} {dtype}: not a one-shot call")
            continue
        gen = torch.Generator(device=dev()).manual_seed(M * 31 + K)
        a_full = torch.randn(M, W * K, generator=gen, device=dev())
        w_full = torch.randn(N, W * K, generator=gen, device=dev()) / (W * K) ** 0.5
        bias = torch.randn(N, generator=gen, device=dev())
        ref = 0.5 * (a_full.to(dtype).float() @ w_full.to(dtype).float().t()) + bias.to(dtype).float()
        cols = slice(rank * K, (rank + 1) * K)
        a, w = a_full[:, cols].to(dtype).contiguous(), w_full[:, cols].to(dtype).contiguous()
        for call in range(3):  # the first builds the plan, the second captures its eager replay, the third replays
            out = torch.full((M, N), float("nan"), device=dev(), dtype=dtype)
            fluxlite.gemm_ar(a, w, bias.to(dtype), impl="fused", out=out, scale=0.5)
            fluxlite.synchronize()
            err = rel_err(out, ref)
            if not err < TOL:
                failures.append(f"M={M} K={K} N={N} {dtype} call {call}: rel err {err:.3g}")
            if one_shot:  # every rank sums the partials in rank order: the same bits everywhere
                outs = [torch.empty_like(out) for _ in range(W)]
                dist.all_gather(outs, out)
                if not all(torch.equal(o, outs[0]) for o in outs):
                    failures.append(f"M={M} K={K} N={N} {dtype} call {call}: the ranks' outputs differ")
    assert not failures, "\n".join(failures)


def test_gemm_ar_fused_at_random_shapes():
    run_gpu_ranks(_eager, 2, 17)


def test_gemm_ar_one_shot_at_random_small_m():
    run_gpu_ranks(_eager, 2, 29, True)


def test_gemm_ar_fused_on_whole_output_rows_at_random_shapes():
    """Rows off 16 bytes: the weight padded, the buffers on whole rows, the end cropping every chunk."""
    run_gpu_ranks(_eager, 2, 41, False, True)


def _graph(rank: int, W: int, M: int, N: int) -> None:
    import fluxlite

    K, dtype = 2048, torch.bfloat16
    a = torch.empty(M, K, device=dev(), dtype=dtype)
    w = torch.empty(N, K, device=dev(), dtype=dtype)
    out = torch.empty(M, N, device=dev(), dtype=dtype)
    fluxlite.gemm_ar(a.normal_(), w.normal_(), impl="fused", out=out)  # eagerly first: the plan, the workspace
    fluxlite.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fluxlite.gemm_ar(a, w, impl="fused", out=out)
    failures = []
    for step in range(20):
        gen = torch.Generator(device=dev()).manual_seed(step)
        a_full = torch.randn(M, W * K, generator=gen, device=dev()).to(dtype)
        w_full = (torch.randn(N, W * K, generator=gen, device=dev()) / (W * K) ** 0.5).to(dtype)
        a.copy_(a_full[:, rank * K:(rank + 1) * K])
        w.copy_(w_full[:, rank * K:(rank + 1) * K])
        out.fill_(float("nan"))
        graph.replay()
        fluxlite.synchronize()
        err = rel_err(out, a_full.float() @ w_full.float().t())
        if not err < TOL:
            failures.append(f"replay {step}: rel err {err:.3g}")
    dist.barrier()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("M, N", [(37, 3000), (8000, 3000), (8192, 8192), (8001, 3003)],
                         ids=["one-shot", "two-shot", "tapered", "whole-rows"])
def test_gemm_ar_fused_replays_from_a_captured_graph(M, N):
    from fluxlite.ops import AR

    assert AR.tapers(2, M, N) == (M == 8192)
    assert (AR.output_columns(M, 2048, N, 2) > N) == (N % 8 != 0)  # the weight padded inside the capture
    run_gpu_ranks(_graph, 2, M, N)
