"""GEMM-AllReduce on CPU ranks: every impl against a float64 reference at 2, 3 and 4 ranks, on odd
shapes (one row, rows not divisible by the ranks, odd K and N), with a bias and a scale, outputs
poisoned first (deterministic mode fills every ``torch.empty`` with NaN, and half the calls pass a
NaN-filled ``out=``); both fused paths, the one-shot (decode sizes: M = 1 to 255) and the two-shot
(the one-shot turned off, ``ONE_SHOT_MAX_BYTES = 0``), each with the interpreted Triton kernel as its
consumer too (the two-shot also at shapes drawn at random, marked slow), and the two-shot with
tapered splits; its input checks; the custom op's fake and
autograd against float64 autograd. Tolerances: tests/numerics.py (bf16: every rank's partial is
rounded to bf16 before the reduction). A mismatched call and a missing peer are tests/test_safety_cpu.py's."""

from __future__ import annotations

import importlib
import itertools
import random

import pytest
import torch

import fluxlite
from fluxlite.fused.state import states_of
from fluxlite.ops import AR

from .dist_utils import run_ranks
from .numerics import check, poison_empty_tensors, randn

SHAPES = [(1, 5, 7), (13, 24, 40), (66, 17, 9)]  # (M, K per rank, N): one row, M % W != 0, odd sizes
ONE_SHOT_SHAPES = [(1, 5, 7), (3, 24, 40), (7, 17, 9), (64, 33, 50), (255, 20, 23)]  # decode sizes, odd K and N
IMPLS = ("sequential", "decomposed", "fused")


def _reference(a_parts, w_parts, bias, scale) -> torch.Tensor:
    ref = sum(a.double() @ w.double().t() for a, w in zip(a_parts, w_parts)) * (1.0 if scale is None else scale)
    return ref if bias is None else ref + bias.double()


def _cases(rank: int, W: int, dtypes, impls, shapes=SHAPES, one_shot=False) -> None:
    """Every case of ``shapes``; the fused ones on the one-shot path if ``one_shot``, else the two-shot."""
    poison_empty_tensors()
    if not one_shot:
        importlib.import_module("fluxlite.ops.gemm_ar").ONE_SHOT_MAX_BYTES = 0  # no call is small enough
    gen = torch.Generator().manual_seed(21)
    failures: list[str] = []
    for M, K, N in shapes:
        for dtype in dtypes:
            assert AR.one_shot(W, M, N, dtype.itemsize) == one_shot, (M, N, dtype)
    for rep, (M, K, N), dtype, (use_bias, scale) in itertools.product(
            range(2), shapes, dtypes, ((False, None), (True, 0.5))):
        a_parts = [randn(gen, M, K, dtype=dtype) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=dtype) for _ in range(W)]
        bias = randn(gen, N, dtype=dtype) if use_bias else None
        ref = _reference(a_parts, w_parts, bias, scale)
        for impl, use_out in itertools.product(impls, (False, True)):
            name = f"W={W} r={rank} rep={rep} M={M} K={K} N={N} {dtype} bias={use_bias} scale={scale} {impl} out={use_out}"
            out = torch.full((M, N), float("nan"), dtype=dtype) if use_out else None
            res = fluxlite.gemm_ar(a_parts[rank], w_parts[rank], bias, impl=impl, out=out, scale=scale, timeout=30)
            if out is not None and res.data_ptr() != out.data_ptr():
                failures.append(f"{name}: the result is not the out= tensor")
            check(name, res, ref, dtype, failures)
    fluxlite.release_workspaces()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_gemm_ar_matches_float64_reference(world_size):
    """Every impl; the fused one two-shot."""
    run_ranks(_cases, world_size, (torch.float32, torch.bfloat16), IMPLS)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_gemm_ar_one_shot_matches_float64_reference(world_size):
    """Decode sizes, fused: one shot, every rank reading every partial from its /dev/shm mapping."""
    run_ranks(_cases, world_size, (torch.float32, torch.bfloat16), ("fused",), ONE_SHOT_SHAPES, True)


KERNEL_SHAPES = SHAPES + [(301, 8, 40)]  # the last: two splits per chunk (blocks of 32 rows)


@pytest.mark.parametrize("world_size", [2, 3])
def test_gemm_ar_fused_with_the_kernel_as_consumer(world_size):
    """Two-shot: the interpreted GEMM-RS kernel reduces each rank's chunk straight into its rows of
    ``out`` (fp32: the interpreter's bf16 is not the GPU's), the producer and the interpreted end
    (``gather_end``) gather the chunks; at 3 ranks the last chunk is cut short (13
    rows: 5, 5, 3; 301 rows: 101, 101, 99) or empty (1 row). At 301 rows a chunk has two splits, so
    the end copies the peers' splits one by one, each once its ``reduced`` flag is set."""
    from fluxlite.kernels.gemm_core import INTERPRET_CONFIG

    assert AR.schedule(world_size, 0, 301, INTERPRET_CONFIG.block_m).splits == 2
    run_ranks(_cases, world_size, (torch.float32,), ("fused",), KERNEL_SHAPES,
              env={"FLUXLITE_CPU_CONSUMER": "triton"})


@pytest.mark.parametrize("world_size", [2, 3])
def test_gemm_ar_one_shot_with_the_kernel_as_consumer(world_size):
    """One-shot: the interpreted one-shot kernel signals, waits and reduces every rank's partial
    through their addresses (fp32): runs of M * N elements shorter than a tile, and 255 x 23, one
    whole tile and a masked rest."""
    run_ranks(_cases, world_size, (torch.float32,), ("fused",), ONE_SHOT_SHAPES, True,
              env={"FLUXLITE_CPU_CONSUMER": "triton"})


def _random_shapes(rank: int, W: int, seed: int) -> None:
    """Two shots with the interpreted kernels at shapes drawn from ``seed`` (the same on every rank):
    up to 700 rows (chunks of one to several splits, the last chunk cut short or empty), odd K and N."""
    rng = random.Random(seed)
    shapes = [(rng.randint(1, 700), rng.randint(1, 40), rng.randint(1, 60)) for _ in range(5)]
    _cases(rank, W, (torch.float32,), ("fused",), shapes)


@pytest.mark.slow
@pytest.mark.parametrize("world_size,seed", [(3, 11), (4, 12)])
def test_gemm_ar_fused_with_the_kernel_as_consumer_at_random_shapes(world_size, seed):
    """:func:`test_gemm_ar_fused_with_the_kernel_as_consumer` at five shapes drawn from ``seed``."""
    run_ranks(_random_shapes, world_size, seed, env={"FLUXLITE_CPU_CONSUMER": "triton"})


TAPERED_SHAPES = {2: (1100, 7, 9), 3: (1700, 5, 11), 4: (2300, 6, 5)}  # chunks of 9 row blocks; M % W != 0 at 3, 4


def _tapered(rank: int, W: int) -> None:
    """Two shots with tapered splits (the rule's threshold lowered so that small shapes take them):
    the plan's splits are a half, three eighths and an eighth of the chunk, and every case matches
    float64."""
    module = importlib.import_module("fluxlite.ops.gemm_ar")
    module.ONE_SHOT_MAX_BYTES, module.TAPER_MIN_TILES = 0, 0
    M, K, N = TAPERED_SHAPES[W]
    assert AR.tapers(W, M, N)
    fluxlite.gemm_ar(torch.randn(M, K), torch.randn(N, K), impl="fused", timeout=30)
    plans = [p for st in states_of(torch.distributed.group.WORLD)
             for key, p in st.plans.items() if key[0] == "gemm_ar"]
    assert len(plans) == 1 and plans[0].sched.tapered, plans
    assert plans[0].sched.split_blocks(2) == range(7, 9), plans[0].split_rows  # 9 blocks: 4, 3, 2
    fluxlite.release_workspaces()
    _cases(rank, W, (torch.float32, torch.bfloat16), ("fused",), [TAPERED_SHAPES[W]])


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_gemm_ar_tapered_two_shots_match_float64_reference(world_size):
    run_ranks(_tapered, world_size)


def _paths_in_turn(rank: int, W: int) -> None:
    """One shape by one path on both data halves, then the other, then the first again, with no
    release between: each path has its own plan (and views of the data halves). Each path's calls
    have a timeout of their own, so that a call does not repeat the other path's call."""
    module = importlib.import_module("fluxlite.ops.gemm_ar")
    budget = module.ONE_SHOT_MAX_BYTES
    gen = torch.Generator().manual_seed(8)
    M, K, N = 13, 24, 40
    failures: list[str] = []
    for step, one_shot in enumerate((True, True, False, False, True)):  # each path on both data halves
        module.ONE_SHOT_MAX_BYTES = budget if one_shot else 0
        a_parts = [randn(gen, M, K, dtype=torch.float32) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=torch.float32) for _ in range(W)]
        out = torch.full((M, N), float("nan"))
        fluxlite.gemm_ar(a_parts[rank], w_parts[rank], impl="fused", out=out, timeout=30 if one_shot else 31)
        check(f"W={W} r={rank} call {step} one_shot={one_shot}", out, _reference(a_parts, w_parts, None, None),
              torch.float32, failures)
    module.ONE_SHOT_MAX_BYTES = budget
    fluxlite.release_workspaces()
    assert not failures, "\n".join(failures)


def test_gemm_ar_paths_in_turn_on_one_workspace():
    run_ranks(_paths_in_turn, 2)


def _bad_inputs(rank: int, W: int) -> None:
    a, w = torch.randn(6, 8), torch.randn(5, 8)
    for kwargs, exc, words in (
            (dict(a=a, weight=torch.randn(5, 9)), ValueError, "share K"),
            (dict(a=a, weight=w, bias=torch.randn(4)), ValueError, "bias must be 1-D [5]"),
            (dict(a=a, weight=w, out=torch.empty(3, 5)), ValueError, "out must have shape (6, 5)"),
            (dict(a=a, weight=w, impl="fast"), ValueError, "impl must be one of"),
            (dict(a=a.to(torch.int32), weight=w.to(torch.int32)), TypeError, "a.dtype"),
            (dict(a=a, weight=w, timeout=-1), ValueError, "timeout"),
            (dict(a=a, weight=w, scale="2"), TypeError, "scale")):
        with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            fluxlite.gemm_ar(**kwargs)


def test_gemm_ar_rejects_bad_inputs_before_any_communication():
    run_ranks(_bad_inputs, 2)


def _autograd(rank: int, W: int) -> None:
    from fluxlite import library

    gen = torch.Generator().manual_seed(5)
    M, K, N = 9, 6, 7
    a_parts = [randn(gen, M, K, dtype=torch.float64) for _ in range(W)]
    w_parts = [randn(gen, N, K, dtype=torch.float64) for _ in range(W)]
    bias = randn(gen, N, dtype=torch.float64)
    g = randn(gen, M, N, dtype=torch.float64)
    a, w, b = (t.clone().requires_grad_() for t in (a_parts[rank], w_parts[rank], bias))
    out = library.gemm_ar(a, w, b, impl="sequential", scale=0.5)
    out.backward(g)
    # float64 reference: the same sum, differentiated by autograd on one rank
    ref_parts = [t.clone().requires_grad_() for t in (*a_parts, *w_parts, bias)]
    ref = 0.5 * sum(x @ y.t() for x, y in zip(ref_parts[:W], ref_parts[W:2 * W])) + ref_parts[-1]
    ref.backward(g)
    for name, got, want in (("out", out, ref), ("grad a", a.grad, ref_parts[rank].grad),
                            ("grad weight", w.grad, ref_parts[W + rank].grad), ("grad bias", b.grad, ref_parts[-1].grad)):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10), (name, (got - want).abs().max())
    fake = torch.library.opcheck(torch.ops.fluxlite.gemm_ar, (a_parts[rank], w_parts[rank], bias,
                                                             library.group_name_of(None), "sequential", None, None),
                                 test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in fake.values()), fake


def test_gemm_ar_custom_op_differentiates_like_float64_autograd():
    run_ranks(_autograd, 2)
