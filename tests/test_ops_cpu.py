"""AG-GEMM and GEMM-RS on CPU ranks (gloo + the /dev/shm workspace), against float64 references.

Each spawn runs a whole matrix of cases (spawning costs seconds; a case costs milliseconds) and
reports every failing case at once. Tolerances: see tests/numerics.py (fp32 1e-5, bf16 1e-2 relative
to ``|ref| + rms(ref)``).

Outputs are poisoned: the ranks run in deterministic mode, which fills every
``torch.empty``/``new_empty`` with NaN; half the calls pass a NaN-filled ``out=``; and the
workspace's data halves are filled with NaN bytes before each call. So a row the protocol never
wrote, or read from a stale buffer, fails.
"""

from __future__ import annotations

import glob
import itertools
import os
import random

import pytest
import torch
import torch.distributed as dist

import fluxlite
from fluxlite.fused.call import CPU_BLOCK_M
from fluxlite.ops import AG, RS

from .dist_utils import run_ranks
from .numerics import ag_reference, check, poison_empty_tensors, poison_workspace, randn, rs_reference

IMPLS = ("sequential", "fused", "auto")
DTYPES = (torch.float32, torch.bfloat16)
SEED = int(os.environ.get("FLUXLITE_TEST_SEED", "20261122"))


def _shapes(world_size: int) -> list[tuple[int, int, int]]:
    """(rows per rank, K, N) cases: edge cases plus seeded random ones.

    Rows per rank is AG's ``m`` and GEMM-RS's ``M / W``. Covers 1 row, exactly one block, ragged
    last blocks, several splits per chunk (>= 8 blocks), and K/N that are not powers of two.
    """
    B = CPU_BLOCK_M
    fixed = [(1, 3, 5), (B, 32, 16), (2 * B + 3, 24, 40), (8 * B + 5, 9, 7)]
    rng = random.Random(SEED + world_size)
    rand = [(rng.randint(2, 3 * B), rng.randint(5, 150), rng.randint(3, 130)) for _ in range(3)]
    return fixed + rand


def _ag_cases(rank, W, gen, failures):
    for case, (m, K, N) in enumerate(_shapes(W)):
        for dtype in DTYPES:
            a_full = randn(gen, W * m, K, dtype=dtype)
            weight = randn(gen, N, K, dtype=dtype)
            bias = randn(gen, N, dtype=dtype)
            a = a_full[rank * m : (rank + 1) * m]
            if case == 2:  # non-contiguous operands are accepted and give the right answer
                a = a.t().contiguous().t()
                weight = weight.t().contiguous().t()
                assert not a.is_contiguous() and not weight.is_contiguous()
            for with_bias in (False, True):
                b = bias if with_bias else None
                ref = ag_reference(a_full, weight, b)
                for impl, gathered, use_out in itertools.product(IMPLS, (False, True), (False, True)):
                    name = (f"ag_gemm W={W} r={rank} m={m} K={K} N={N} {dtype} bias={with_bias} impl={impl} "
                            f"gathered={gathered} out={use_out}")
                    out = _poison(W, (W * m, N), dtype, use_out)
                    res = fluxlite.ag_gemm(a, weight, b, impl=impl, return_gathered=gathered, out=out)
                    if gathered:
                        if not (isinstance(res, tuple) and len(res) == 2):
                            failures.append(f"{name}: expected (out, gathered), got {type(res).__name__}")
                            continue
                        res, g = res
                        if g.shape != a_full.shape or g.dtype != dtype or not torch.equal(g, a_full):
                            failures.append(f"{name}: gathered input differs from the rank-major concatenation")
                    _check_out(name, res, out, failures)
                    check(name, res, ref, dtype, failures)


def _rs_cases(rank, W, gen, failures):
    for case, (mc, K, N) in enumerate(_shapes(W)):
        M = W * mc
        for dtype in DTYPES:
            a_parts = [randn(gen, M, K, dtype=dtype) for _ in range(W)]
            w_parts = [randn(gen, N, K, dtype=dtype) for _ in range(W)]
            bias = randn(gen, N, dtype=dtype)
            a, weight = a_parts[rank], w_parts[rank]
            if case == 2:
                a = a.t().contiguous().t()
                weight = weight.t().contiguous().t()
            for with_bias in (False, True):
                b = bias if with_bias else None
                ref = rs_reference(a_parts, w_parts, b, rank)
                for impl, use_out in itertools.product(IMPLS, (False, True)):
                    name = f"gemm_rs W={W} r={rank} M={M} K={K} N={N} {dtype} bias={with_bias} impl={impl} out={use_out}"
                    out = _poison(W, (mc, N), dtype, use_out)
                    res = fluxlite.gemm_rs(a, weight, b, impl=impl, out=out)
                    _check_out(name, res, out, failures)
                    check(name, res, ref, dtype, failures)


def _gather_cases(rank, W, gen, failures):
    """AG-GEMM's transport alone (``AG.gather``, the Column backward's input): the rank-major
    concatenation, bit for bit, into a poisoned workspace; twice per shape (both parities), a fused
    GEMM-RS between the two, one input not contiguous."""
    from fluxlite.group import resolve_group
    from fluxlite.host_flags import resolve_timeout

    tp = resolve_group(None)
    for case, (m, K, _) in enumerate(_shapes(W)):
        for dtype in DTYPES:
            for repeat in range(2):
                a_full = randn(gen, W * m, K, dtype=dtype)
                a = a_full[rank * m : (rank + 1) * m]
                if case == 2:
                    a = a.t().contiguous().t()
                _poison(W, (1,), dtype, False)
                gathered = AG.gather(a, tp, resolve_timeout(None))
                if gathered.shape != a_full.shape or not torch.equal(gathered, a_full):
                    failures.append(f"gather W={W} r={rank} m={m} K={K} {dtype} call {repeat}: not the rank-major "
                                    "concatenation")
                fluxlite.gemm_rs(randn(gen, W * m, K, dtype=dtype), randn(gen, 3, K, dtype=dtype), impl="fused")


def _poison(W: int, shape, dtype, use_out: bool):
    """NaN-fill this rank's workspace data while no peer is inside a call (barrier on both sides);
    return a NaN-filled ``out`` tensor when ``use_out``."""
    if W > 1:
        dist.barrier()
        poison_workspace(fluxlite.get_workspace())
        dist.barrier()
    return torch.full(shape, float("nan"), dtype=dtype) if use_out else None


def _check_out(name: str, res, out, failures: list[str]) -> None:
    if out is not None and isinstance(res, torch.Tensor) and res.data_ptr() != out.data_ptr():
        failures.append(f"{name}: the result is not the out= tensor")


def _matrix(rank: int, W: int) -> None:
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(SEED)  # the same global operands on every rank
    failures: list[str] = []
    _ag_cases(rank, W, gen, failures)
    _rs_cases(rank, W, gen, failures)
    if W > 1:
        _gather_cases(rank, W, gen, failures)
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 4])
def test_ops_match_float64_reference(world_size):
    run_ranks(_matrix, world_size)


def _check_empty(name: str, out: torch.Tensor, ref: torch.Tensor, dtype, failures: list[str]) -> None:
    """``check``, but exact where the reference is all zeros (``K = 0``, no bias), which gives
    ``check``'s relative tolerance nothing to scale by."""
    if ref.numel() and not ref.any():
        if not torch.equal(out, torch.zeros(ref.shape, dtype=out.dtype)):
            failures.append(f"{name}: expected zeros {tuple(ref.shape)}, got {out}")
        return
    check(name, out, ref, dtype, failures)


def _empty_gemms(rank: int, W: int) -> None:
    """Every op at every impl with one GEMM dimension empty: no rows, no output columns, or ``K = 0``
    (the result is the bias alone). Each runs as sequential (``impl_of``), on every rank, and matches
    the float64 reference in a NaN-filled ``out``."""
    from fluxlite.ops import AG, AR, RS

    poison_empty_tensors()
    gen = torch.Generator().manual_seed(SEED + 7)
    failures: list[str] = []
    dtype = torch.float32
    for (m, K, N), with_bias, impl in itertools.product([(0, 12, 9), (5, 12, 0), (5, 0, 9)], (False, True),
                                                        IMPLS + ("decomposed",)):
        bias = randn(gen, N, dtype=dtype) if with_bias else None
        a_parts = [randn(gen, W * m, K, dtype=dtype) for _ in range(W)]  # AG: the gathered rows; RS, AR: each rank's
        w_parts = [randn(gen, N, K, dtype=dtype) for _ in range(W)]
        total = sum(x.double() @ w.double().t() for x, w in zip(a_parts, w_parts))
        total = total if bias is None else total + bias.double()
        cases = [  # (op, a, weight, output rows, float64 reference)
            (AG, a_parts[0][rank * m : (rank + 1) * m], w_parts[0], W * m, ag_reference(a_parts[0], w_parts[0], bias)),
            (RS, a_parts[rank], w_parts[rank], m, total[rank * m : (rank + 1) * m]),
            (AR, a_parts[rank], w_parts[rank], W * m, total),
        ]
        for op, a, weight, rows, ref in cases:
            name = f"{op.name} W={W} r={rank} m={m} K={K} N={N} bias={with_bias} impl={impl}"
            if op.impl_of(a, weight, bias, impl=impl) != "sequential":
                failures.append(f"{name}: impl_of is not sequential")
            out = torch.full((rows, N), float("nan"), dtype=dtype)
            _check_out(name, op(a, weight, bias, impl=impl, out=out), out, failures)
            _check_empty(name, out, ref, dtype, failures)
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(120)
def test_empty_gemms_run_as_sequential_at_every_impl():
    run_ranks(_empty_gemms, 2)


@pytest.mark.timeout(60)
def test_world_size_one():
    """A 1-rank group: every impl works with no communication and no workspace."""
    run_ranks(_matrix, 1)


# ---- 200 back-to-back calls ---------------------------------------------------------------------

CALLS = 200
RAMP = 40  # the first calls ramp up to the largest sizes; after that the workspace must stop growing


def _back_to_back(rank: int, W: int) -> None:
    """Mixed AG/RS fused calls (and some sequential ones) with varying M, all checked.

    The workspace must grow during the ramp (beyond its initial 1 MiB), then be reused: the same
    capacity and mapping for every later call. Each fused call advances the epoch by exactly one;
    sequential calls leave it alone. After every growth no /dev/shm file of this workspace remains.
    """
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(SEED + 7)
    rng = random.Random(SEED + 7)
    K_ag, N_ag, K_rs, N_rs = 256, 24, 40, 160
    max_rows = 1100  # AG staging 1100*256*4 B ~ 1.1 MiB; RS receive W*1100*160*4 B >= 1.4 MiB
    ws = fluxlite.get_workspace()
    state = fluxlite.fused.state_of(ws)  # the fused layer's epochs on ws
    capacities = [ws.capacity]
    prefix = ws._backend.prefix
    base_ptr = None
    failures: list[str] = []
    for i in range(CALLS):
        rows = max_rows * (i + 1) // RAMP if i < RAMP else rng.randint(1, max_rows)
        impl = "sequential" if i % 10 == 9 else "fused"
        epoch_before = state.epoch
        if i % 2 == 0:
            a_full = randn(gen, W * rows, K_ag, dtype=torch.float32)
            weight = randn(gen, N_ag, K_ag, dtype=torch.float32)
            out = fluxlite.ag_gemm(a_full[rank * rows : (rank + 1) * rows], weight, impl=impl)
            check(f"call {i} ag m={rows} {impl}", out, ag_reference(a_full, weight, None), torch.float32, failures)
        else:
            a_parts = [randn(gen, W * rows, K_rs, dtype=torch.float32) for _ in range(W)]
            w_parts = [randn(gen, N_rs, K_rs, dtype=torch.float32) for _ in range(W)]
            bias = randn(gen, N_rs, dtype=torch.float32)
            out = fluxlite.gemm_rs(a_parts[rank], w_parts[rank], bias, impl=impl)
            check(f"call {i} rs M={W * rows} {impl}", out, rs_reference(a_parts, w_parts, bias, rank),
                  torch.float32, failures)
        want_epoch = epoch_before + (impl == "fused")
        assert state.epoch == want_epoch, f"call {i} ({impl}): epoch {state.epoch}, expected {want_epoch}"
        if ws.capacity != capacities[-1]:
            assert i < RAMP, f"call {i}: workspace grew after the ramp ({capacities[-1]} -> {ws.capacity} bytes)"
            capacities.append(ws.capacity)
            dist.barrier()  # every rank is past the growth: all names must be gone
            left = glob.glob(prefix + "*")
            assert not left, f"call {i}: /dev/shm files left after growth: {left}"
        if i == RAMP:
            base_ptr = ws.flags(rank).data_ptr()
        elif i > RAMP:
            assert ws.flags(rank).data_ptr() == base_ptr, f"call {i}: workspace was re-mapped without growing"
    assert fluxlite.get_workspace() is ws
    assert not failures, f"{len(failures)} failing calls:\n" + "\n".join(failures[:40])
    assert len(capacities) >= 2 and capacities == sorted(capacities), f"workspace never grew: {capacities}"
    assert capacities[-1] >= W * max_rows * N_rs * 4, capacities
    assert fluxlite.fused.state_of(ws) is state
    assert state.epoch == sum(1 for i in range(CALLS) if i % 10 != 9)


@pytest.mark.timeout(120)
def test_200_back_to_back_calls_grow_and_reuse_the_workspace():
    run_ranks(_back_to_back, 2)


def _plan_reuse(rank, W):
    """A plan per (op, m/M, K, N, epilogue activation and row scales): round 1 builds one per key,
    later rounds build nothing, and every output is right (a plan shared across keys would compute
    the wrong thing, or wait on a flag no peer sets). A scale is a launch argument: a new value each
    round builds no plan. A plan's producer programs and workspace views are made once per data half
    and made again after the workspace grows."""
    from fluxlite.epilogue import Epilogue
    from fluxlite.fused.call import get_plan
    from fluxlite.ops.ag_gemm import SM_PUSH

    from .test_epilogue import _reference as epilogue_reference

    f32 = torch.float32
    gen = torch.Generator().manual_seed(7)
    shapes = [(40, 24, 16), (41, 24, 16), (40, 24, 17), (40, 25, 16)]  # each differs in one of m, N, K
    ag_epilogues = [(None, False), ("gelu", False), ("swiglu", False), (None, True)]  # (activation, row scales)
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    failures: list[str] = []
    for rep, scale in enumerate((0.5, 2.0, 0.25)):
        for (m, K, N), (act, row_scaled) in itertools.product(shapes, ag_epilogues):
            a_full = randn(gen, W * m, K, dtype=f32)
            w = randn(gen, 2 * N if act == "swiglu" else N, K, dtype=f32)
            scales = torch.rand(W * m, generator=gen) + 0.5 if row_scaled else None
            out = fluxlite.ag_gemm(a_full[rank * m : (rank + 1) * m], w, impl="fused", activation=act, scale=scale,
                                   row_scale=None if scales is None else scales[rank * m : (rank + 1) * m])
            ref = epilogue_reference(a_full, w, Epilogue(act, row_scaled, scale), None, scales)
            check(f"ag m={m} K={K} N={N} {act} row_scaled={row_scaled} rep={rep}", out, ref, f32, failures)
        for m, K, N in shapes:
            a_parts, w = [randn(gen, W * m, K, dtype=f32) for _ in range(W)], randn(gen, N, K, dtype=f32)
            out = fluxlite.gemm_rs(a_parts[rank], w, impl="fused", scale=scale)
            check(f"rs m={m} K={K} N={N} rep={rep}", out, scale * rs_reference(a_parts, [w] * W, None, rank), f32,
                  failures)
        want = len(shapes) * (len(ag_epilogues) + 1)
        assert state.plan_builds == want and len(state.plans) == want, (rep, state.plan_builds, len(state.plans))

    # One plan's bindings: a program and views per data half for the same tensors, rebuilt after growth.
    m, K, N = shapes[0]
    a_full, w = randn(gen, W * m, K, dtype=f32), randn(gen, N, K, dtype=f32)
    a = a_full[rank * m : (rank + 1) * m].clone()  # the same tensor in every call below
    variant = SM_PUSH if AG.small_call(W, m, K, N, 4) else ""  # the SMs push a small call's rows: a plan of its own
    plan = get_plan(state, AG, m, K, N, f32, variant)
    assert state.plan_builds == want, "the plan of a shape called above was built again"
    plan.bound.clear()
    for i in range(4):
        check(f"same tensors, call {i}", fluxlite.ag_gemm(a, w, impl="fused"), ag_reference(a_full, w, None), f32,
              failures)
    assert len(plan.bound.programs) == 2 and set(plan.bound.views) == {0, 1}, (plan.bound.programs, plan.bound.views)
    ws = fluxlite.get_workspace()
    big = ws.capacity // (W * K * 4) + 1  # rows per rank whose gathered rows need more than the capacity
    big_full = randn(gen, W * big, K, dtype=f32)
    check("growing call", fluxlite.ag_gemm(big_full[rank * big : (rank + 1) * big], w, impl="fused"),
          ag_reference(big_full, w, None), f32, failures)
    assert ws.generation >= 2 and not plan.bound.programs and not plan.bound.views, "bindings outlived a growth"
    check("same tensors after growth", fluxlite.ag_gemm(a, w, impl="fused"), ag_reference(a_full, w, None), f32,
          failures)
    assert plan.bound.generation == ws.generation and len(plan.bound.programs) == 1
    assert not failures, f"{len(failures)} failing calls:\n" + "\n".join(failures[:20])


def test_call_plans_are_built_once_and_never_collide():
    run_ranks(_plan_reuse, 2)


def _config_keys(rank, W):
    """With the kernel as the consumer, a plan's schedule and tile tables follow the kernel config:
    the same call under two configs gets two plans, each right; a second round builds nothing."""
    from fluxlite.kernels.gemm_core import GemmConfig

    f32 = torch.float32
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    assert state.consumer == "triton"
    configs = [GemmConfig(block_m=32, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=1, num_progs=2),
               GemmConfig(block_m=16, block_n=16, block_k=16, group_m=1, num_warps=4, num_stages=1, num_progs=2)]
    gen = torch.Generator().manual_seed(11)
    m, K, N = 40, 24, 40
    failures: list[str] = []
    for rep, config in itertools.product(range(2), configs):
        a_full, w = randn(gen, W * m, K, dtype=f32), randn(gen, N, K, dtype=f32)
        a_parts = [randn(gen, W * m, K, dtype=f32) for _ in range(W)]
        with torch.no_grad():
            a = a_full[rank * m : (rank + 1) * m]
            args = AG.check(a, w, None, group=None, impl="fused", timeout=20.0, out=None)
            out, _ = AG.fused(state, AG.prepare(state, args, config), args)
            check(f"ag block_m={config.block_m} rep={rep}", out, ag_reference(a_full, w, None), f32, failures)
            args = RS.check(a_parts[rank], w, None, group=None, impl="fused", timeout=20.0, out=None)
            out = RS.fused(state, RS.prepare(state, args, config), args)
            check(f"rs block_m={config.block_m} rep={rep}", out, rs_reference(a_parts, [w] * W, None, rank), f32,
                  failures)
        assert state.plan_builds == 2 * (configs.index(config) + 1 if rep == 0 else len(configs)), rep
    assert not failures, failures


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), reason="interpreter test")
def test_kernel_configs_get_their_own_plans():
    run_ranks(_config_keys, 2, env={"FLUXLITE_CPU_CONSUMER": "triton"})
