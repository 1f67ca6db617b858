"""Repeated calls (:mod:`fluxlite.ops`): a call whose arguments differ from an earlier call's only in
their data skips the checks, the dispatch and (fused) the planning. It
must still be exactly right, never skip a check its own arguments would fail, and stop being taken
once what it repeats no longer stands (a released workspace, a poisoned one, a dispatch choice that
changed).

gloo CPU ranks; fp32 results against float64 references (tests/numerics.py tolerances), on fresh
random data each call, with every ``torch.empty`` NaN-filled and NaN-filled ``out=`` tensors.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import fluxlite
from fluxlite import dispatch, ops
from fluxlite.errors import FluxliteError

from .dist_utils import count_runs, run_ranks
from .numerics import ag_reference, check, poison_empty_tensors, randn, rs_reference

F32 = torch.float32


class _Counted:
    """Counts the full checks of each op (a repeat makes none)."""

    def __init__(self) -> None:
        self.ag = self.rs = 0
        ag, rs = ops.AG.check, ops.RS.check

        def check_ag(*args, **kwargs):
            self.ag += 1
            return ag(*args, **kwargs)

        def check_rs(*args, **kwargs):
            self.rs += 1
            return rs(*args, **kwargs)

        ops.AG.check, ops.RS.check = check_ag, check_rs  # on the op objects (these ranks' own processes)


def _ag(gen, rank, W, m, K, N, failures, name, *, dtype=F32, bias=False, out=False, gathered=False, transposed=False,
        strided_a=False, scale=None, timeout=None, impl="fused"):
    """One AG-GEMM call on fresh data, checked against float64."""
    a_full, weight = randn(gen, W * m, K, dtype=dtype), randn(gen, N, K, dtype=dtype)
    b = randn(gen, N, dtype=dtype) if bias else None
    a = a_full[rank * m : (rank + 1) * m]
    if strided_a:
        a = a.t().contiguous().t()
    if transposed:  # a backward's W.t() layout: used without a copy
        weight = weight.t().contiguous().t()
    dest = torch.full((W * m, N), float("nan"), dtype=dtype) if out else None
    res = fluxlite.ag_gemm(a, weight, b, impl=impl, out=dest, return_gathered=gathered, scale=scale, timeout=timeout)
    if gathered:
        res, g = res
        if not torch.equal(g, a_full):
            failures.append(f"{name}: the gathered input differs")
    if out and res.data_ptr() != dest.data_ptr():
        failures.append(f"{name}: the result is not in out=")
    ref = ag_reference(a_full, weight, b) * (1.0 if scale is None else scale)
    check(name, res, ref, dtype, failures)


def dist_group():
    return fluxlite.group.resolve_group(None).group


def _rs(gen, rank, W, mc, K, N, failures, name, *, out=False, impl="fused"):
    a_parts = [randn(gen, W * mc, K, dtype=F32) for _ in range(W)]
    w_parts = [randn(gen, N, K, dtype=F32) for _ in range(W)]
    dest = torch.full((mc, N), float("nan")) if out else None
    res = fluxlite.gemm_rs(a_parts[rank], w_parts[rank], impl=impl, out=dest)
    check(name, res, rs_reference(a_parts, w_parts, None, rank), F32, failures)


def _repeats(rank: int, W: int) -> None:
    poison_empty_tensors()
    counted = _Counted()
    gen = torch.Generator().manual_seed(7)  # the same draws on every rank
    m, K, N = 70, 24, 40  # two row blocks of 64, the second ragged
    failures: list[str] = []
    # Repeats: each distinct argument key is checked once, however often it comes back.
    for rep in range(4):
        _ag(gen, rank, W, m, K, N, failures, f"ag rep {rep}")
        _ag(gen, rank, W, m, K, N, failures, f"ag out bias rep {rep}", out=True, bias=True)
        _ag(gen, rank, W, m, K, N, failures, f"ag gathered rep {rep}", gathered=True)
        _ag(gen, rank, W, m, K, N, failures, f"ag strided a rep {rep}", strided_a=True)  # copied on every call
        _rs(gen, rank, W, m, K, N, failures, f"rs rep {rep}")
        _rs(gen, rank, W, m, K, N, failures, f"rs out rep {rep}", out=True)
        assert (counted.ag, counted.rs) == (4, 2), (rep, counted.ag, counted.rs)
    assert ops.RS.impl_of(randn(gen, W * m, K, dtype=F32), randn(gen, N, K, dtype=F32), impl="fused") == "fused"
    assert counted.rs == 2, "impl_of a remembered call must not check again"
    # Anything the checks read that differs takes the full path (and is right).
    variants = [dict(transposed=True), dict(dtype=torch.bfloat16), dict(scale=2.0), dict(timeout=30.0),
                dict(impl="sequential")]
    for i, variant in enumerate(variants):
        before = counted.ag
        _ag(gen, rank, W, m, K, N, failures, f"ag {variant}", **variant)
        assert counted.ag == before + 1, variant
        _ag(gen, rank, W, m, K, N, failures, f"ag {variant} again", **variant)
        assert counted.ag == before + 1, variant  # every impl is remembered, sequential too
    _ag(gen, rank, W, m + 1, K, N, failures, "ag other m")
    assert not failures, failures
    # Arguments that compare equal to a remembered call's but are wrong still fail their checks.
    a, weight = randn(gen, m, K, dtype=F32), randn(gen, N, K, dtype=F32)
    fluxlite.ag_gemm(a, weight, impl="fused", scale=1.0, timeout=1)  # True == 1 == 1.0, and hashes alike
    with pytest.raises(TypeError, match="scale must be a float"):
        fluxlite.ag_gemm(a, weight, impl="fused", scale=True, timeout=1)
    with pytest.raises(ValueError, match="timeout must be None or a positive number"):
        fluxlite.ag_gemm(a, weight, impl="fused", scale=1.0, timeout=True)
    with pytest.raises(TypeError, match="out.dtype"):
        fluxlite.ag_gemm(a, weight, impl="fused", out=torch.empty(W * m, N, dtype=torch.float64))
    with pytest.raises(ValueError, match="out must have shape"):
        fluxlite.ag_gemm(a, weight, impl="fused", out=torch.empty(W * m, N + 1))
    # A tensor on another device that get_device() reads alike (-1 for CPU and meta) is checked too,
    # before any communication: the workspace is not poisoned, and the next call is right.
    for op, rows in ((fluxlite.ag_gemm, m), (fluxlite.gemm_rs, W * m), (fluxlite.gemm_ar, m)):
        op(randn(gen, rows, K, dtype=F32), weight, impl="fused")
        with pytest.raises(ValueError, match="weight must be on a's device"):
            op(randn(gen, rows, K, dtype=F32).to("meta"), weight, impl="fused")
        with pytest.raises(ValueError, match="weight must be on a's device"):
            op(randn(gen, rows, K, dtype=F32), weight.to("meta"), impl="fused")
    # An out that shares memory with an input: the key holds no addresses, the repeat checks it.
    buffer = randn(gen, W * m * max(K, N), dtype=F32)
    a_in, out_in = buffer[:m * K].view(m, K), buffer[:W * m * N].view(W * m, N)
    fluxlite.ag_gemm(randn(gen, m, K, dtype=F32), weight, impl="fused", out=torch.empty(W * m, N))
    with pytest.raises(ValueError, match="out must not share memory with a"):
        fluxlite.ag_gemm(a_in, weight, impl="fused", out=out_in)
    _ag(gen, rank, W, m, K, N, failures, "ag after the device checks")
    _rs(gen, rank, W, m, K, N, failures, "rs after the device checks")
    assert not failures, failures


def _poisoned_then_released(rank: int, W: int) -> None:
    poison_empty_tensors()
    counted = _Counted()
    gen = torch.Generator().manual_seed(8)
    failures: list[str] = []
    for rep in range(2):
        _ag(gen, rank, W, 33, 16, 24, failures, f"ag rep {rep}")
    assert counted.ag == 1
    state = fluxlite.fused.states_of(dist_group())[0]
    state.poison(FluxliteError("test: an earlier call failed"))
    with pytest.raises(FluxliteError, match="an earlier call failed"):
        _ag(gen, rank, W, 33, 16, 24, failures, "ag after the poison")
    assert counted.ag == 1, "the poisoned call was a repeat, which must raise as well"
    fluxlite.release_workspaces()
    _ag(gen, rank, W, 33, 16, 24, failures, "ag after the release")  # a fresh workspace: checked and planned anew
    assert counted.ag == 2, counted.ag
    assert fluxlite.fused.states_of(dist_group())[0] is not state
    assert not failures, failures


def _auto_setup(seed: int, W: int, m: int, K: int, N: int):
    """``(counted checks, generator, dispatch key)`` of an auto AG-GEMM test on ``[m, K]`` rows per rank."""
    poison_empty_tensors()
    tp = fluxlite.group.resolve_group(None)
    key = dispatch.Key.of("ag_gemm", tp, torch.empty(m, K), torch.empty(N, K), W * m)
    return _Counted(), torch.Generator().manual_seed(seed), key


def _auto_follows_dispatch(rank: int, W: int) -> None:
    m, K, N = 40, 16, 24
    counted, gen, key = _auto_setup(9, W, m, K, N)
    failures: list[str] = []
    calls = {"sequential": 0}
    seq = ops.AG.sequential

    def counting_sequential(*args):
        calls["sequential"] += 1
        return seq(*args)

    ops.AG.sequential = counting_sequential  # on the op object (this rank's own process)
    # What a cache file would give (dispatch's own memory): fused for this key.
    dispatch._MEMORY[key] = dispatch.Choice("fused", source="cache")
    for rep in range(3):
        _ag(gen, rank, W, m, K, N, failures, f"auto fused rep {rep}", impl="auto")
    assert counted.ag == 1 and calls["sequential"] == 0, (counted.ag, calls)
    # Another fused choice (a retune): the call is checked and planned again once, then repeated.
    dispatch._MEMORY[key] = dispatch.Choice("fused", source="cache")
    for rep in range(2):
        _ag(gen, rank, W, m, K, N, failures, f"auto fused again rep {rep}", impl="auto")
    assert counted.ag == 2 and calls["sequential"] == 0, (counted.ag, calls)
    # The choice changes (a new cache, a retune): the remembered fused call must not be repeated.
    dispatch.clear_memory()
    dispatch._MEMORY[key] = dispatch.Choice("sequential", source="cache")
    _ag(gen, rank, W, m, K, N, failures, "auto sequential", impl="auto")
    assert counted.ag == 3 and calls["sequential"] == 1, (counted.ag, calls)
    # A repeated call whose remembered choice is not fused looks the choice up once and repeats it,
    # never going through dispatch.choose (its key built twice, the mode read twice).
    asked = {"choose": 0}
    choose = dispatch.choose

    def counting_choose(*args, **kwargs):
        asked["choose"] += 1
        return choose(*args, **kwargs)

    dispatch.choose = counting_choose
    try:
        for rep in range(2):
            _ag(gen, rank, W, m, K, N, failures, f"auto sequential rep {rep}", impl="auto")
    finally:
        dispatch.choose = choose
    assert asked["choose"] == 0 and calls["sequential"] == 3, (asked, calls)
    assert counted.ag == 3, counted.ag  # the first is checked; its repeats are not, as impl="sequential"'s
    assert not failures, failures


def _auto_per_mode(rank: int, W: int) -> None:
    """Modes whose fused choices differ (two configs): each mode's calls repeat their own decisions.
    Calls that alternate between the modes, as a profiler's rounds or a decode loop between prefill
    batches do, must not re-check and re-plan on every switch."""
    from fluxlite.kernels.gemm_core import GemmConfig

    m, K, N = 24, 16, 40
    counted, gen, key = _auto_setup(11, W, m, K, N)
    queued = dispatch.Choice("fused", GemmConfig(group_m=16), source="cache")
    alone = dispatch.Choice("fused", GemmConfig(num_stages=4), source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(queued, alone, queued)
    failures: list[str] = []
    for rep in range(4):
        for mode in ("throughput", "latency"):
            with dispatch.assume_mode(mode):
                _ag(gen, rank, W, m, K, N, failures, f"auto {mode} rep {rep}", impl="auto")
    assert counted.ag == 2, f"{counted.ag} full checks for 8 calls in two modes: one per mode expected"
    assert not failures, failures


def _python_calls(fn, calls: int) -> dict[tuple, int]:
    """Python and C calls that ``calls`` calls of ``fn`` make (cProfile), by function."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    return {k: v[1] for k, v in pstats.Stats(profile).stats.items()}


def _auto_repeat_costs_a_stamp(rank: int, W: int) -> None:
    """A repeated auto call makes the calls of a call that names its choice, plus reading the stamp
    (fluxlite.dispatch.repeat_stamp): no dispatch look-up, in a declared mode and without one, where
    the modes' choices differ; and it is right on fresh data."""
    m, K, N = 32, 16, 24
    counted, gen, key = _auto_setup(13, W, m, K, N)
    seq, dec = dispatch.Choice("sequential", source="cache"), dispatch.Choice("decomposed", source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(seq, dec, seq)
    failures: list[str] = []
    tp_rows = torch.Generator().manual_seed(5)
    a = randn(tp_rows, m, K, dtype=F32)
    weight = randn(tp_rows, N, K, dtype=F32)
    looked_up = {"n": 0}
    eager_choice_of = dispatch.eager_choice_of

    def counting(*args):
        looked_up["n"] += 1
        return eager_choice_of(*args)

    for mode, named in ((None, "sequential"), ("latency", "decomposed"), ("throughput", "sequential")):
        with dispatch.assume_mode(mode) if mode else contextlib.nullcontext():
            for impl in ("auto", named):  # first calls: checked, dispatched, remembered
                fluxlite.ag_gemm(a, weight, impl=impl)
            dispatch.eager_choice_of = counting
            try:
                auto = _python_calls(lambda: fluxlite.ag_gemm(a, weight, impl="auto"), 20)
            finally:
                dispatch.eager_choice_of = eager_choice_of
            explicit = _python_calls(lambda: fluxlite.ag_gemm(a, weight, impl=named), 20)
            extra = {f"{k[0].rsplit('/', 1)[-1]}:{k[2]}": (auto.get(k, 0) - explicit.get(k, 0)) / 20
                     for k in set(auto) | set(explicit) if auto.get(k, 0) != explicit.get(k, 0)}
            if looked_up["n"] or sum(extra.values()) > 5:
                failures.append(f"mode {mode}: a repeated auto call looked up dispatch {looked_up['n']} times "
                                f"and made these calls more than impl={named!r}, per call: {extra}")
            _ag(gen, rank, W, m, K, N, failures, f"auto repeated, mode {mode}", impl="auto")
    assert not failures, failures


def _auto_by_the_rule(rank: int, W: int) -> None:
    """Where the rule decides (CPU ranks with nothing measured or cached; one rank: sequential), a
    repeated auto call repeats its first call's decisions as a named call does: checked once, the
    rule asked once per call signature (never at one rank), dispatch.choose never; the calls a
    repeat makes are the named call's and a stamp's; asked again once the choices in memory change;
    right on fresh data every time."""
    m, K, N = 40, 16, 24
    counted, gen, key = _auto_setup(19, W, m, K, N)
    failures: list[str] = []
    asked = {"rule": 0, "choose": 0}
    rule, choose = dispatch.rule, dispatch.choose

    def counting_rule(*args, **kwargs):
        asked["rule"] += 1
        return rule(*args, **kwargs)

    def counting_choose(*args, **kwargs):
        asked["choose"] += 1
        return choose(*args, **kwargs)

    dispatch.rule, dispatch.choose = counting_rule, counting_choose
    try:
        for rep in range(4):
            _ag(gen, rank, W, m, K, N, failures, f"auto by the rule rep {rep}", impl="auto")
        assert counted.ag == 1 and asked == {"rule": int(W > 1), "choose": 0}, (counted.ag, asked)
        a, weight = randn(gen, m, K, dtype=F32), randn(gen, N, K, dtype=F32)
        fluxlite.ag_gemm(a, weight, impl="sequential")
        auto = _python_calls(lambda: fluxlite.ag_gemm(a, weight, impl="auto"), 20)
        named = _python_calls(lambda: fluxlite.ag_gemm(a, weight, impl="sequential"), 20)
        extra = sum(auto.values()) - sum(named.values())
        assert extra <= 5 * 20, f"a repeated auto call by the rule made {extra / 20:.1f} calls more than the named call"
        # Another key's choice arrives (a cache file, a measurement): the stamp moves, so the rule is
        # asked again, once, and the call checked once more
        other = dispatch.Key.of("gemm_rs", fluxlite.group.resolve_group(None), torch.empty(8, K), torch.empty(N, K), 8)
        dispatch._MEMORY[other] = dispatch.Choice("sequential", source="cache")
        for rep in range(2):
            _ag(gen, rank, W, m, K, N, failures, f"auto by the rule after a change, rep {rep}", impl="auto")
        assert counted.ag == 3 and asked == {"rule": 2 * int(W > 1), "choose": 0}, (counted.ag, asked)
    finally:
        dispatch.rule, dispatch.choose = rule, choose
    assert not failures, failures


def _auto_captured_runs_its_own_choice(rank: int, W: int) -> None:
    """Undeclared, with modes whose choices differ (throughput fused, both sequential), an eager auto
    call runs sequential and a captured one fused: a captured call must not repeat the eager call's
    decisions, nor an eager call the captured one's. The capture is simulated for the decision
    (dispatch's and the repeat's capture query); the fused call itself runs eagerly on CPU ranks."""
    from types import SimpleNamespace

    from fluxlite.ops import op as op_module

    m, K, N = 24, 16, 40
    counted, gen, key = _auto_setup(17, W, m, K, N)
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(fused, seq, seq)
    ran = count_runs(ops.AG)
    now = {"capturing": False}
    query = lambda device: now["capturing"]  # noqa: E731
    dispatch._workspace, op_module.capturing = SimpleNamespace(capturing=query), query
    failures: list[str] = []
    expected = {"sequential": 0, "fused": 0}

    def call(name: str, runs: str) -> None:
        _ag(gen, rank, W, m, K, N, failures, name, impl="auto")
        expected[runs] += 1
        if ran != expected:
            failures.append(f"{name}: ran {ran}, expected {expected}")

    for rep in range(2):
        call(f"eager {rep}", "sequential")
    with dispatch.assume_mode("throughput"):  # the warm-up a capture of the throughput choice needs
        call("eager, throughput declared", "fused")
    now["capturing"] = True
    for rep in range(2):
        call(f"captured {rep}", "fused")
    now["capturing"] = False
    for rep in range(2):
        call(f"eager again {rep}", "sequential")
    assert not failures, failures


@pytest.mark.timeout(120)
def test_a_captured_auto_call_and_an_eager_one_repeat_their_own_choices():
    run_ranks(_auto_captured_runs_its_own_choice, 2)


@pytest.mark.timeout(120)
def test_a_repeated_auto_call_costs_the_named_call_and_a_stamp():
    run_ranks(_auto_repeat_costs_a_stamp, 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_repeated_auto_call_by_the_rule_costs_the_named_call_and_a_stamp(world_size):
    run_ranks(_auto_by_the_rule, world_size)


@pytest.mark.timeout(120)
def test_auto_repeats_each_modes_own_choice():
    run_ranks(_auto_per_mode, 2)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world_size", [2, 4])
def test_repeated_calls_are_right_and_skip_only_what_they_may(world_size):
    run_ranks(_repeats, world_size)


@pytest.mark.timeout(120)
def test_a_poisoned_or_released_workspace_is_not_repeated():
    run_ranks(_poisoned_then_released, 2)


@pytest.mark.timeout(120)
def test_auto_repeats_only_the_choice_dispatch_still_makes():
    run_ranks(_auto_follows_dispatch, 2)
