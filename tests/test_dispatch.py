"""Measured dispatch (fluxlite/dispatch.py): measuring on gloo ranks (forced with
``FLUXLITE_AUTO=measure``), the agreement step, the cache file (written, reloaded, corrupt), the
rule, the decision (:func:`fluxlite.dispatch.decide`) on injected per-round samples, the rounds it
adds while unsettled and their reduction over ranks, the mode of a call and the choice it runs, and
the fused kernel configs it may pick compiling for sm_90.

The decision tests give each candidate per-round ratios to sequential over random per-round
sequential times (the rounds' drift), so only the paired ratios decide; each asserts exact picks."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

import fluxlite
from fluxlite import dispatch, workspace
from fluxlite.ops import AG, RS
from fluxlite.timing import Timer

from .dist_utils import run_ranks
from .numerics import ag_reference, check, randn, rs_reference

K, N = 24, 40


def _calls(rank: int, W: int, rows: int, seed: int) -> dict[str, dispatch.Choice]:
    """One auto AG-GEMM and GEMM-RS (``rows`` rows per rank), checked against float64 references;
    returns what auto chose for each, gathered over the ranks and required to be equal."""
    gen = torch.Generator().manual_seed(seed)
    a_full, weight = randn(gen, W * rows, K, dtype=torch.float32), randn(gen, N, K, dtype=torch.float32)
    a_parts = [randn(gen, W * rows, K, dtype=torch.float32) for _ in range(W)]
    w_parts = [randn(gen, N, K, dtype=torch.float32) for _ in range(W)]
    failures: list[str] = []
    tp = fluxlite.resolve_group()
    out = fluxlite.ag_gemm(a_full[rank * rows : (rank + 1) * rows], weight)
    check("ag auto", out, ag_reference(a_full, weight, None), torch.float32, failures)
    out = fluxlite.gemm_rs(a_parts[rank], w_parts[rank])
    check("rs auto", out, rs_reference(a_parts, w_parts, None, rank), torch.float32, failures)
    assert not failures, failures
    chosen = {}
    for op, a, w in (("ag_gemm", a_full[:rows], weight), ("gemm_rs", a_parts[rank], w_parts[rank])):
        key = dispatch.Key.of(op, tp, a, w, W * rows)
        chosen[op] = dispatch.describe(key, 0.0, a.device, a.dtype)
    everyone = [None] * W
    dist.all_gather_object(everyone, {op: (c.to_json(), c.source) for op, c in chosen.items()})
    assert all(e == everyone[0] for e in everyone), f"ranks chose differently: {everyone}"
    return chosen


def _measure_then_reload(rank: int, W: int, phase: str, cache_dir: str) -> None:
    chosen = _calls(rank, W, rows=12, seed=1)
    if phase == "off":  # FLUXLITE_AUTO=off: the rule, no agreement step, nothing written
        assert all(c.source == "rule" and c.impl == "sequential" for c in chosen.values()), chosen
        assert not os.path.exists(os.path.join(cache_dir, "dispatch.json"))
        return
    want = "measured" if phase == "first" else "cache"
    assert all(c.source == want for c in chosen.values()), (phase, chosen)
    entries = dispatch.load_cache(Path(cache_dir) / "dispatch.json")
    assert sorted(k.split()[0] for k in entries) == ["ag_gemm", "gemm_rs"], entries
    for e in entries.values():
        assert set(e["times_ms"]) == set(e["vs_baseline"]) == {"sequential", "decomposed", "fused"}, e
        assert all(t["throughput"] > 0 and t["latency"] > 0 and t["eager"] > 0 for t in e["times_ms"].values()), e
        assert all(set(by_mode) == {"throughput", "latency", "eager", "host"} for by_mode in e["vs_baseline"].values()), e
        assert 5 <= e["rounds"] <= 10 and e["confidence"] == dispatch.CONFIDENCE, e
        assert {e["impl"], e["modes"]["throughput"]["impl"], e["modes"]["latency"]["impl"]} <= set(e["times_ms"]), e
        for label, by_mode in e["vs_baseline"].items():  # (low, median, high), sequential's exactly 1
            assert all(lo <= med <= hi for lo, med, hi in by_mode.values()), e
            assert label != "sequential" or all(b == [1.0, 1.0, 1.0] for b in by_mode.values()), e


@pytest.mark.timeout(120)
def test_cache_is_written_reloaded_and_agreed(tmp_path):
    env = {"FLUXLITE_CACHE_DIR": str(tmp_path)}
    run_ranks(_measure_then_reload, 2, "off", str(tmp_path), env=dict(env, FLUXLITE_AUTO="off"))
    run_ranks(_measure_then_reload, 2, "first", str(tmp_path), env=dict(env, FLUXLITE_AUTO="measure"))
    first = json.loads((tmp_path / "dispatch.json").read_text())
    run_ranks(_measure_then_reload, 2, "again", str(tmp_path), env=dict(env, FLUXLITE_AUTO="measure"))
    again = json.loads((tmp_path / "dispatch.json").read_text())
    assert again == first, "a run served from the cache must not measure or rewrite it"


def _candidates_run_as_calls(rank: int, W: int) -> None:
    """Count what each candidate's timed calls do while ``auto`` measures a new key."""
    counts = dict(check=0, sequential=0, decomposed=0, prepare=0, fused=0)
    for name in counts:
        original = getattr(RS, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        setattr(RS, name, counted)  # on the op's instance: its class and the other ops keep theirs
    gen = torch.Generator().manual_seed(11)
    a_parts = [randn(gen, 6 * W, K, dtype=torch.float32) for _ in range(W)]
    w_parts = [randn(gen, N, K, dtype=torch.float32) for _ in range(W)]
    out = torch.full((6, N), float("nan"))
    fluxlite.gemm_rs(a_parts[rank], w_parts[rank], out=out)
    failures: list[str] = []
    check("rs auto", out, rs_reference(a_parts, w_parts, None, rank), torch.float32, failures)
    assert not failures, failures
    assert counts["sequential"] >= 5 and counts["decomposed"] >= 5 and counts["fused"] >= 5, counts
    # every candidate is checked once, as a call naming it is, then repeated as the caller's repeated
    # call is (its checks passed for these arguments); and the auto call itself: its own check
    assert counts["check"] == 1 + 3, counts
    # a fused candidate is planned once, then repeated: what a caller's repeated fused call costs; the
    # call itself plans once more where auto then runs fused (the measured choice is its own object,
    # and the plan it asks for is the candidate's, from the plan cache)
    planned = counts["prepare"]
    chosen = RS.impl_of(a_parts[rank], w_parts[rank])
    assert planned == 1 + (chosen == "fused"), (counts, chosen)


@pytest.mark.timeout(120)
def test_auto_times_each_candidate_as_a_call_that_names_it(tmp_path):
    """What ``auto`` measures is what its choice costs the caller: each candidate through its repeats
    (checked once, fused planned once). Timed without the calls' own path, sequential looked faster and
    fused slower in latency mode than the calls that run them (2xH200, 8-1024 rows)."""
    run_ranks(_candidates_run_as_calls, 2, env={"FLUXLITE_AUTO": "measure", "FLUXLITE_CACHE_DIR": str(tmp_path)})


def _entry(impl: str) -> dict:
    """A cache entry choosing ``impl`` in every mode."""
    one = dict(impl=impl, config=None)
    return dict(one, modes={m: one for m in dispatch.MEASURED_MODES}, times_ms={})


def _key_text(op: str, rows: int) -> str:
    return dispatch.Key(op, dispatch.m_bucket(rows), K, N, "float32", 2, "cpu", fluxlite.__version__).text


def _write(path: Path, entries: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "dispatch.json").write_text(json.dumps(dict(schema=dispatch.CACHE_SCHEMA, entries=entries)))


def _different_files(rank: int, W: int, base: str) -> None:
    os.environ["FLUXLITE_CACHE_DIR"] = os.path.join(base, f"r{rank}")  # a cache file per rank
    # 1. rank 0's file holds decomposed for rows=12, rank 1's nothing (and a foreign entry, which
    # it warns of and ignores): both measure, and agree.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = _calls(rank, W, rows=12, seed=2)
    assert all(c.source == "measured" for c in chosen.values()), chosen
    assert any("ignoring 1 foreign entries" in str(w.message) for w in caught) == (rank == 1), caught
    # 2. both files hold the same choice for rows=40: taken as it is, with no measuring.
    chosen = _calls(rank, W, rows=40, seed=3)
    assert [(c.impl, c.source) for c in chosen.values()] == [("decomposed", "cache")] * 2, chosen
    # 3. a rank that cannot build the workspace: fused is not a candidate, even where cached.
    os.environ["FLUXLITE_WORKSPACE"] = "off" if rank == 1 else "on"
    chosen = _calls(rank, W, rows=100, seed=4)
    assert all(c.source == "measured" and c.impl != "fused" for c in chosen.values()), chosen
    os.environ["FLUXLITE_WORKSPACE"] = "on"
    # 4. ranks in different calls raise, naming both, instead of measuring different things.
    a = torch.randn(3 + rank, K)
    with pytest.raises(fluxlite.FluxliteCallMismatchError, match="auto ag_gemm"):
        fluxlite.ag_gemm(a, torch.randn(N, K))


@pytest.mark.timeout(120)
def test_ranks_with_different_cache_files_agree(tmp_path):
    both = {_key_text(op, 2 * 40): _entry("decomposed") for op in ("ag_gemm", "gemm_rs")}
    both |= {_key_text(op, 2 * 100): _entry("fused") for op in ("ag_gemm", "gemm_rs")}
    _write(tmp_path / "r0", {**both, **{_key_text(op, 2 * 12): _entry("decomposed") for op in ("ag_gemm", "gemm_rs")}})
    _write(tmp_path / "r1", {**both, "a foreign key": dict(impl="fused", config=dict(block_m=3))})
    run_ranks(_different_files, 2, str(tmp_path), env={"FLUXLITE_AUTO": "measure"})


def test_cached_choices_that_cannot_run_here_are_measured_again():
    """A cache names fused where a rank has no workspace, or a config the op's kernel does not hold
    (a file written by other code): those choices are not used."""
    s4 = next(c for c in dispatch.GPU_CONFIGS if c.num_stages == 4)
    fused, seq = dispatch.Choice("fused", s4, source="cache"), dispatch.Choice("sequential", source="cache")
    both_modes = dispatch.Choices.of(fused, seq, seq)
    rs_configs = lambda: RS.kernel_configs(None)  # noqa: E731
    assert dispatch._runnable(both_modes, True, lambda: dispatch.GPU_CONFIGS)
    assert not dispatch._runnable(both_modes, True, rs_configs)
    assert not dispatch._runnable(both_modes, False, lambda: dispatch.GPU_CONFIGS)
    assert dispatch._runnable(dispatch.Choices.of(seq, seq, seq), False, rs_configs)


def test_corrupt_and_foreign_cache_files_are_ignored_with_a_warning(tmp_path):
    path = tmp_path / "dispatch.json"
    for text, why in (("{ not json", "is not JSON"), ('{"schema": "other/9", "entries": {}}', "is not a fluxlite"),
                      ("[1, 2]", "is not a fluxlite")):
        path.write_text(text)
        with pytest.warns(RuntimeWarning, match=why):
            assert dispatch.load_cache(path) == {}
    fused = dict(impl="fused", config=dict(vars(dispatch.GPU_CONFIGS[1])))
    good = dict(fused, modes=dict(throughput=fused, latency=dict(impl="sequential", config=None)), times_ms={})
    foreign = {"a": dict(impl="bogus"), "b": dict(impl="fused", config=dict(block_m=7)),
               "c": dict(impl="fused", config=dict(vars(dispatch.GPU_CONFIGS[0]), block_k=16)), "d": "text",
               "e": dict(fused, times_ms={}),  # a schema-2 entry: one choice, no modes
               "f": dict(good, modes=dict(throughput=fused, latency=dict(impl="bogus")))}
    _write(tmp_path, {"good": good, **foreign})
    with pytest.warns(RuntimeWarning, match="ignoring 6 foreign entries"):
        assert dispatch.load_cache(path) == {"good": good}
    assert dispatch.load_cache(tmp_path / "missing.json") == {}
    choices = dispatch._choices_from(good, "cache")
    assert choices.throughput is choices.both != choices.latency == dispatch.Choice("sequential"), choices
    assert choices.throughput.config == dispatch.GPU_CONFIGS[1] and choices.throughput.source == "cache"
    assert choices.to_json() == {k: good[k] for k in ("impl", "config", "modes")}


SEQ, DEC, FUSED = "sequential", "decomposed", "fused"
ORDER = [SEQ, FUSED, DEC]  # dispatch.candidates' order: decomposed last
MODES = dispatch.MEASURED_MODES


def _per_round(ratio, rounds: int) -> list[float]:
    return list(ratio) if isinstance(ratio, (list, tuple)) else [ratio] * rounds


def _samples(seed: int, rounds: int, **ratios) -> dict:
    """Per-round samples: sequential's ms random in every round and mode (clock drift), each other
    candidate's that times its ratios, ``label=(throughput ratios, latency ratios)`` (one per round,
    or one number for all)."""
    gen = torch.Generator().manual_seed(seed)
    base = {m: (0.5 + 2 * torch.rand(rounds, generator=gen, dtype=torch.float64)).tolist() for m in MODES}
    out = {SEQ: base}
    for label, by_mode in ratios.items():
        out[label] = {m: [b * r for b, r in zip(base[m], _per_round(by_mode[i], rounds))] for i, m in enumerate(MODES)}
    return out


def _picks(verdict: dispatch.Verdict) -> tuple[str, str, str]:
    return verdict.throughput, verdict.latency, verdict.both


def test_order_statistics_bound_the_median_at_the_stated_confidence():
    assert [dispatch._order_rank(n) for n in (1, 4, 5, 6, 8, 10, 15, 20)] == [None, None, 5, 6, 7, 9, 12, 15]
    gen = torch.Generator().manual_seed(0)
    x = [(v + 1) / 10 for v in torch.randperm(10, generator=gen).tolist()]
    assert dispatch.ratio_bounds(x) == (0.2, 0.55, 0.9)
    assert dispatch.ratio_bounds([math.nan, 3.0, 1.0, 5.0, 2.0, 4.0]) == (1.0, 3.0, 5.0)
    assert dispatch.ratio_bounds([0.9] * 4) == (-math.inf, 0.9, math.inf)  # too few rounds for a bound
    # the bounds hold: a skewed population's median is above the high bound (below the low one) in
    # at most 1 - CONFIDENCE of draws
    for n in (5, 10, 20):
        draws = torch.randn(4000, n, generator=gen, dtype=torch.float64).exp()  # lognormal: median 1
        bounds = [dispatch.ratio_bounds(row) for row in draws.tolist()]
        assert sum(hi < 1 for _, _, hi in bounds) <= (1 - dispatch.CONFIDENCE) * len(bounds), n
        assert sum(lo > 1 for lo, _, _ in bounds) <= (1 - dispatch.CONFIDENCE) * len(bounds), n


def test_a_clear_win_in_both_modes_is_every_modes_choice():
    v = dispatch.decide(_samples(1, 5, decomposed=(0.95, 0.95), fused=(0.8, 0.85)), ORDER)
    assert _picks(v) == (FUSED, FUSED, FUSED) and v.open == (), v
    assert v.ratios[FUSED]["throughput"] == pytest.approx((0.8, 0.8, 0.8)) and v.ratios[SEQ]["latency"] == (1, 1, 1)


def test_a_noisy_round_asks_for_more_and_sequential_keeps_what_it_leaves_unsettled():
    noisy = [0.9, 0.9, 1.05, 0.9, 0.9]  # the median alone would take fused; one round says 5% slower
    v = dispatch.decide(_samples(2, 5, fused=(noisy, 0.9)), ORDER)
    assert _picks(v) == (SEQ, FUSED, SEQ) and v.open == (FUSED,), v  # throughput unsettled: not a win, not safe
    v = dispatch.decide(_samples(3, 10, fused=(noisy + [0.9] * 5, 0.9)), ORDER)  # ten rounds: one outlier is noise
    assert _picks(v) == (FUSED, FUSED, FUSED) and v.open == (), v
    v = dispatch.decide(_samples(4, 5, fused=([0.5] * 4 + [2.0], 1.0)), ORDER)  # a 2x-slower round: no win yet
    assert _picks(v) == (SEQ, SEQ, SEQ) and v.open == (FUSED,), v


def test_a_tie_between_fused_and_decomposed_goes_to_fused():
    """Decomposed is last by preference: within the tie margin fused keeps the choice (it costs a
    fraction of decomposed's host time), whichever median is lower; decomposed takes it only where it
    is faster beyond the margin."""
    v = dispatch.decide(_samples(5, 5, decomposed=(0.895, 1.0), fused=(0.90, 1.0)), ORDER)
    assert _picks(v) == (FUSED, SEQ, FUSED) and v.open == (), v  # decomposed is 0.6% faster: within the margin
    v = dispatch.decide(_samples(6, 5, decomposed=(0.88, 1.0), fused=(0.90, 1.0)), ORDER)
    assert _picks(v) == (DEC, SEQ, DEC), v  # 2.2% faster: not a tie
    v = dispatch.decide(_samples(26, 5, decomposed=(0.90, 1.0), fused=(0.88, 1.0)), ORDER)
    assert _picks(v) == (FUSED, SEQ, FUSED), v
    v = dispatch.decide(_samples(7, 5, fused=(0.995, 0.995)), ORDER)  # faster than sequential by less than the margin
    assert _picks(v) == (SEQ, SEQ, SEQ) and v.open == (), v


def test_a_later_config_replaces_the_default_only_where_it_is_faster_beyond_noise():
    """Among winners, the earlier (the default config) stays unless a later one is faster than it at
    the stated confidence, in paired rounds: a lower median that the rounds do not settle is noise."""
    g16 = "fused[g16]"
    order = [SEQ, FUSED, g16, DEC]
    # latency: fused 0.80 every round; g16's median 0.77 (4% lower) but 1.04x fused in two of five rounds
    v = dispatch.decide(_samples(20, 5, fused=(0.8, 0.8), **{g16: (0.8, [0.76, 0.832, 0.77, 0.832, 0.75])}), order)
    assert v.ratios[g16]["latency"][1] < v.ratios[FUSED]["latency"][1] * (1 - dispatch.TIE_MARGIN)
    assert (v.throughput, v.latency) == (FUSED, FUSED), v
    # throughput: g16 3% faster than fused in every round: settled, so it replaces the default there
    v = dispatch.decide(_samples(21, 5, fused=(0.8, 0.8), **{g16: (0.776, 0.8)}), order)
    assert (v.throughput, v.latency) == (g16, FUSED), v
    # a later candidate is compared with the current pick, not only with sequential: decomposed wins
    # throughput against sequential but is not faster than fused beyond the margin
    v = dispatch.decide(_samples(22, 5, decomposed=(0.895, 0.9), fused=(0.9, 0.5)), order)
    assert (v.throughput, v.latency) == (FUSED, FUSED), v


def test_the_both_choice_keeps_the_default_config_unless_a_later_one_is_settled_faster():
    """The ``both`` choice (least worst slowdown over the modes) gives up the earlier candidate only
    where paired rounds settle it: a later config whose medians are lower in both modes by noise
    does not replace the default; one faster in every round does."""
    g16 = "fused[g16]"
    order = [SEQ, FUSED, g16, DEC]
    noisy = (0.8, [0.79, 0.81, 0.78, 0.83, 0.77]), (0.8, [0.76, 0.832, 0.77, 0.832, 0.75])
    v = dispatch.decide(_samples(23, 5, fused=(0.8, 0.8), **{g16: tuple(r for _, r in noisy)}), order)
    assert all(v.ratios[g16][m][1] < v.ratios[FUSED][m][1] for m in MODES), v  # lower medians in both modes
    assert v.both == FUSED, v
    v = dispatch.decide(_samples(24, 5, fused=(0.8, 0.8), **{g16: (0.776, 0.776)}), order)
    assert _picks(v) == (g16, g16, g16), v
    # faster where the pick is slowest, but slower elsewhere than the pick's worst: the pick stays
    # (worst slowdowns against the best, 0.85 and 0.9: decomposed 1.059, fused 1.133)
    v = dispatch.decide(_samples(25, 5, decomposed=(0.9, 0.9), fused=(0.85, 1.02)), order)
    assert _picks(v) == (FUSED, DEC, DEC), v


def test_a_candidate_faster_in_one_mode_and_slower_beyond_noise_in_the_other_serves_that_mode_only():
    v = dispatch.decide(_samples(8, 5, fused=(0.8, 1.10)), ORDER)  # large shapes' pattern
    assert _picks(v) == (FUSED, SEQ, SEQ) and v.open == (), v
    v = dispatch.decide(_samples(9, 5, fused=(1.05, 0.7)), ORDER)  # small shapes': latency won, throughput lost
    assert _picks(v) == (SEQ, FUSED, SEQ) and v.open == (), v


def test_modes_that_disagree_get_their_own_choices_and_both_stays_within_bound():
    v = dispatch.decide(_samples(10, 5, decomposed=(1.07, 0.9), fused=(0.85, 1.06)), ORDER)
    assert _picks(v) == (FUSED, DEC, SEQ) and v.open == (), v
    v = dispatch.decide(_samples(11, 5, fused=(1.01, 0.9)), ORDER)  # 1% slower in throughput: within MAX_LOSS
    assert _picks(v) == (SEQ, FUSED, FUSED) and v.open == (), v
    v = dispatch.decide(_samples(12, 5, decomposed=(0.97, 0.98), fused=(0.9, 1.015)), ORDER)
    assert _picks(v) == (FUSED, DEC, FUSED), v  # worst slowdown against the best: 1.035 (fused), 1.078 (decomposed)


def _with_host(samples: dict, seed: int, **host_ratios) -> dict:
    """``samples`` with host times: sequential's random per round, each other candidate's its ratio
    to it (one per round, or one number for all; 1 where not given)."""
    rounds = len(samples[SEQ]["latency"])
    gen = torch.Generator().manual_seed(seed)
    base = (0.05 + 0.1 * torch.rand(rounds, generator=gen, dtype=torch.float64)).tolist()
    for label, by_mode in samples.items():
        ratio = _per_round(host_ratios.get(label, 1.0), rounds)
        by_mode[dispatch.HOST] = [b * r for b, r in zip(base, ratio)]
    return samples


def test_a_latency_tie_goes_to_the_candidate_with_the_smaller_host_time():
    """No candidate wins latency mode, but one ties sequential there (median ratio at most 1) with
    its host time settled lower: it is the latency choice, the least host time first. The host
    time never decides throughput or ``both``, nor a latency mode that a candidate wins, nor a tie
    that is a loss in the median or that the host rounds do not settle."""
    tie = [0.9, 1.05, 1.0, 0.95, 1.03]  # latency: median 1.0, bounds 0.9-1.05 (neither a win nor safe)
    v = dispatch.decide(_with_host(_samples(30, 5, fused=(1.2, tie)), 30, fused=0.5), ORDER)
    assert _picks(v) == (SEQ, FUSED, SEQ), v
    assert v.ratios[FUSED][dispatch.HOST] == pytest.approx((0.5, 0.5, 0.5))
    v = dispatch.decide(_with_host(_samples(31, 5, decomposed=(1.2, tie), fused=(1.2, tie)), 31,
                                   decomposed=0.8, fused=0.5), ORDER)
    assert v.latency == FUSED, v  # the least host time, not the first by preference
    v = dispatch.decide(_with_host(_samples(32, 5, fused=(1.2, [1.01] * 5)), 32, fused=0.5), ORDER)
    assert v.latency == SEQ, v  # 1% slower in every round: a loss, whatever its host time
    v = dispatch.decide(_with_host(_samples(33, 5, fused=(1.2, tie)), 33, fused=[0.5, 0.5, 1.0, 0.5, 1.0]), ORDER)
    assert v.latency == SEQ, v  # host time lower in three rounds of five: not settled
    v = dispatch.decide(_with_host(_samples(34, 5, decomposed=(1.0, 0.9), fused=(1.0, tie)), 34, fused=0.3), ORDER)
    assert v.latency == DEC, v  # a win is a win: the host time only settles a tie
    v = dispatch.decide(_samples(35, 5, fused=(1.2, tie)), ORDER)
    assert v.latency == SEQ, v  # no host times measured: sequential keeps the tie


def _with_eager(samples: dict, seed: int, **ratios) -> dict:
    """``samples`` with eager readings: sequential's random per round, each other candidate's its
    ratio to it (one per round, or one number for all; 1 where not given)."""
    rounds = len(samples[SEQ]["latency"])
    gen = torch.Generator().manual_seed(seed)
    base = (0.5 + 2 * torch.rand(rounds, generator=gen, dtype=torch.float64)).tolist()
    for label, by_mode in samples.items():
        by_mode[dispatch.EAGER] = [b * r for b, r in zip(base, _per_round(ratios.get(label, 1.0), rounds))]
    return samples


def test_the_both_choice_reads_eager_calls_in_place_of_the_device_throughput():
    """An eager call (``both``) is timed as eager calls back to back run: where sequential's host is
    the slower part, fused that loses on device time alone wins; where fused's device time wins but
    eager calls lose, ``both`` keeps sequential. The throughput choice (captured or declared calls)
    stays the device time's."""
    v = dispatch.decide(_with_eager(_samples(40, 5, fused=(2.1, 0.6)), 40, fused=0.45), ORDER)  # small M
    assert _picks(v) == (SEQ, FUSED, FUSED) and v.open == (), v
    assert v.ratios[FUSED][dispatch.EAGER] == pytest.approx((0.45,) * 3)
    v = dispatch.decide(_with_eager(_samples(41, 5, fused=(0.8, 1.0)), 41, fused=1.1), ORDER)
    assert _picks(v) == (FUSED, SEQ, SEQ) and v.open == (), v
    v = dispatch.decide(_with_eager(_samples(42, 5, fused=(2.1, 0.6)), 42, fused=[0.9, 1.03, 0.95, 1.0, 0.97]), ORDER)
    assert v.open == (FUSED,) and _picks(v) == (SEQ, FUSED, SEQ), v  # its eager safety straddles the bound
    samples = _with_eager(_samples(43, 5, decomposed=(0.7, 1.0), fused=(1.0, 1.0)), 43, decomposed=1.5)
    v = dispatch.decide(samples, ORDER)
    assert _picks(v) == (DEC, SEQ, SEQ), v  # decomposed's host time: a device-time win only


def test_close_or_too_few_rounds_ask_for_more_rounds():
    v = dispatch.decide(_samples(13, 4, fused=(0.5, 0.5)), ORDER)  # four rounds give no bound at 95%
    assert _picks(v) == (SEQ, SEQ, SEQ) and v.open == (FUSED,), v
    v = dispatch.decide(_samples(14, 5, fused=([0.985, 0.995, 0.98, 0.99, 0.985], 1.0)), ORDER)
    assert v.open == (FUSED,) and _picks(v) == (SEQ, SEQ, SEQ), v  # a win straddles the margin
    v = dispatch.decide(_samples(15, 5, fused=(0.8, [1.0, 1.03, 1.0, 1.01, 0.99])), ORDER)
    assert v.open == (FUSED,) and _picks(v) == (FUSED, SEQ, SEQ), v  # its safety in latency straddles the bound
    v = dispatch.decide(_samples(16, 5, decomposed=(1.0, [1.0, 1.03, 1.0, 1.01, 0.99])), ORDER)
    assert v.open == () and _picks(v) == (SEQ, SEQ, SEQ), v  # the same, but it cannot win: no more rounds


def test_what_the_last_round_leaves_unsettled_is_decided_by_its_median_within_the_loss_bound():
    """Once no more rounds will be timed (``final``), a reading whose bounds still straddle a
    threshold counts by its median: a win if the median is faster than sequential by more than the
    tie margin and the high bound is within the loss bound; safe if the median is at most 1. A
    loss beyond noise stays a loss."""
    noisy_tie = [0.85, 1.1, 0.95, 1.05, 0.9, 1.08, 0.97, 1.0, 0.92, 1.04]  # latency: median 0.985, high 1.08
    samples = _with_eager(_samples(50, 10, fused=(0.8, noisy_tie)), 50, fused=0.7)  # eager: settled, 1.4x faster
    v = dispatch.decide(samples, ORDER)
    assert _picks(v) == (FUSED, SEQ, SEQ) and v.open == (FUSED,), v  # more rounds could settle it
    v = dispatch.decide(samples, ORDER, final=True)
    assert _picks(v) == (FUSED, SEQ, FUSED), v  # not slower at the median: safe; not a win
    noisy_loss = [r * 1.06 for r in noisy_tie]  # median 1.044: a loss, however noisy
    v = dispatch.decide(_with_eager(_samples(51, 10, fused=(0.8, noisy_loss)), 51, fused=0.7), ORDER, final=True)
    assert _picks(v) == (FUSED, SEQ, SEQ), v
    near_win = [0.96, 1.01, 0.95, 0.97, 1.0, 0.96, 0.98, 0.94, 1.01, 0.97]  # median 0.97, high 1.01
    v = dispatch.decide(_samples(52, 10, fused=(near_win, 1.0)), ORDER)
    assert v.throughput == SEQ and v.open == (FUSED,), v
    v = dispatch.decide(_samples(52, 10, fused=(near_win, 1.0)), ORDER, final=True)
    assert _picks(v) == (FUSED, SEQ, FUSED), v  # a win within the loss bound; safe in latency (1.0)
    wide = [0.96, 1.05, 0.95, 0.97, 1.05, 0.96, 0.98, 0.94, 1.05, 0.97]  # median 0.97, high 1.05
    v = dispatch.decide(_samples(53, 10, fused=(wide, 1.0)), ORDER, final=True)
    assert _picks(v) == (SEQ, SEQ, SEQ), v


def test_without_sequential_the_first_timed_candidate_by_preference_is_the_baseline():
    s = _samples(17, 5, decomposed=(1.0, 1.0), fused=(0.8, 1.2))
    del s[SEQ]
    v = dispatch.decide(s, ORDER)  # fused is the baseline: decomposed is 1.25x it in throughput, 0.83x in latency
    assert _picks(v) == (FUSED, DEC, FUSED) and set(v.ratios) == {DEC, FUSED}, v
    assert v.ratios[DEC]["latency"] == pytest.approx((1 / 1.2,) * 3)


SAMPLED = (*MODES, dispatch.HOST)


@contextlib.contextmanager
def _ag_impls_run():
    """A list to which AG-GEMM's ``fused`` and ``sequential`` append their names as they run: wrappers
    set on the op object, so its methods stay as they are, and removed on the way out."""
    ran, real_fused, real_seq = [], AG.fused, AG.sequential

    def counted(name, real):
        def call(*args):
            ran.append(name)
            return real(*args)
        return call

    AG.fused, AG.sequential = counted("fused", real_fused), counted("sequential", real_seq)
    try:
        yield ran
    finally:
        del AG.fused, AG.sequential


def _ranks_decide_alike_and_calls_follow_their_mode(rank: int, W: int) -> None:
    # 1. Ranks read different samples; each round's reading is reduced (max) before deciding. Rank 1
    # reads fused 1.2x slower in throughput in round 2, so five rounds leave it unsettled (rank 0's
    # own readings would have settled), five more of sequential and fused settle it.
    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))

    def measure(readings, most):
        calls = []

        def sample(timed, n, first):
            calls.append((list(timed), n, first))
            return {label: {m: [readings(rank, label, m, r) for r in range(first, first + n)] for m in SAMPLED}
                    for label in timed}

        rounds = dispatch.Rounds(first=5, more=5, most=most, warmup=0, batch_ms=1.0, max_batch=1)
        verdict, samples = dispatch.measure_until_settled(timer, sample, ORDER, rounds)
        for label, timed_rounds in ((SEQ, range(most)), (DEC, range(5)), (FUSED, range(most))):
            for m in SAMPLED:  # the host time is reduced over the ranks as the modes are
                want = [max(readings(q, label, m, r) for q in range(W)) if r in timed_rounds else math.nan
                        for r in range(len(samples[SEQ][m]))]
                assert samples[label][m] == pytest.approx(want, nan_ok=True), (label, m)
        everyone = [None] * W
        dist.all_gather_object(everyone, (_picks(verdict), verdict.open, calls))
        assert all(e == everyone[0] for e in everyone), everyone
        return verdict, calls

    def slow_round(q, label, m, r):
        base = 1.0 + 0.1 * (r % 3)
        return base * (1.0 if label != FUSED else 1.2 if (q, m, r) == (1, "throughput", 2) else 0.9)

    own = {label: {m: [slow_round(0, label, m, r) for r in range(5)] for m in MODES} for label in ORDER}
    assert dispatch.decide(own, ORDER).open == ()
    verdict, calls = measure(slow_round, 10)
    assert calls == [(ORDER, 5, 0), ([SEQ, FUSED], 5, 5)] and _picks(verdict) == (FUSED,) * 3, (calls, verdict)

    # 2. Rank 1 reads fused no faster in throughput every third round: never settled; after the
    # most rounds its median (0.9) within the loss bound (high 1.0) decides: fused in every mode.
    # Read 1.1x slower in those rounds instead, it stays beyond the bound: sequential keeps throughput.
    def every_third(slower):
        def readings(q, label, m, r):
            return 1.0 if label != FUSED else slower if (q, m, r % 3) == (1, "throughput", 0) else 0.9
        return readings

    verdict, calls = measure(every_third(1.0), 15)
    assert calls == [(ORDER, 5, 0), ([SEQ, FUSED], 5, 5), ([SEQ, FUSED], 5, 10)], calls
    assert _picks(verdict) == (FUSED, FUSED, FUSED) and verdict.open == (FUSED,), verdict
    verdict, calls = measure(every_third(1.1), 15)
    assert len(calls) == 3 and _picks(verdict) == (SEQ, FUSED, SEQ) and verdict.open == (FUSED,), verdict

    # 3. An auto call runs the choice of its mode, a repeated fused call included: throughput fused,
    # latency and both (an eager call's) sequential.
    m, K_, N_ = 6, 16, 12
    tp = fluxlite.resolve_group()
    key = dispatch.Key.of("ag_gemm", tp, torch.empty(m, K_), torch.empty(N_, K_), W * m)
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(fused, seq, seq)
    gen = torch.Generator().manual_seed(3)
    failures: list[str] = []
    try:
        with _ag_impls_run() as ran:
            for n, (mode, want) in enumerate((("throughput", FUSED), ("throughput", FUSED), (None, SEQ),
                                              ("latency", SEQ), ("throughput", FUSED))):
                a_full, weight = randn(gen, W * m, K_, dtype=torch.float32), randn(gen, N_, K_, dtype=torch.float32)
                ran.clear()
                with dispatch.assume_mode(mode) if mode else contextlib.nullcontext():
                    out = fluxlite.ag_gemm(a_full[rank * m:(rank + 1) * m], weight, impl="auto")
                check(f"call {n} ({mode})", out, ag_reference(a_full, weight, None), torch.float32, failures)
                assert ran == [want], (n, mode, ran)
    finally:
        dispatch.clear_memory()
    assert not failures, failures


@pytest.mark.timeout(120)
def test_ranks_decide_on_readings_reduced_over_them_and_calls_follow_their_mode():
    run_ranks(_ranks_decide_alike_and_calls_follow_their_mode, 2)


def _choices_follow_the_epilogue(rank: int, W: int) -> None:
    """A GELU call or a row-scaled one does not run the choice remembered for the plain call at its
    shape: each epilogue has its own dispatch key, first call and repeats alike."""
    from fluxlite import epilogue as E

    m, K_, N_ = 6, 16, 12
    tp = fluxlite.resolve_group()
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    probe_a, probe_w = torch.empty(m, K_), torch.empty(N_, K_)
    expected = {None: "fused", "gelu": "sequential", "row_scale": "sequential", "gelu+row_scale": "fused"}
    for tag, want in expected.items():
        op = "ag_gemm" + (f"+{tag}" if tag else "")
        assert AG.dispatch_op(dict(activation="gelu" if tag and "gelu" in tag else None,
                                   row_scale=probe_a[:, 0] if tag and "row_scale" in tag else None)) == op
        dispatch._MEMORY[dispatch.Key.of(op, tp, probe_a, probe_w, W * m)] = fused if want == "fused" else seq
    gen = torch.Generator().manual_seed(4)
    failures: list[str] = []
    try:
        with _ag_impls_run() as ran:
            for n, tag in enumerate(list(expected) * 2):  # the second round: the calls' repeats
                act = "gelu" if tag and "gelu" in tag else None
                a_full, weight = randn(gen, W * m, K_, dtype=torch.float32), randn(gen, N_, K_, dtype=torch.float32)
                scales = torch.rand(W * m, generator=gen) + 0.5 if tag and "row_scale" in tag else None
                ran.clear()
                out = fluxlite.ag_gemm(a_full[rank * m:(rank + 1) * m], weight, impl="auto", activation=act,
                                       row_scale=None if scales is None else scales[rank * m:(rank + 1) * m])
                ref = E.apply(ag_reference(a_full, weight, None), E.Epilogue(act, scales is not None), None,
                              None if scales is None else scales.double(), torch.float64)
                check(f"call {n} ({tag})", out, ref, torch.float32, failures)
                assert ran == [expected[tag]], (n, tag, ran)
    finally:
        dispatch.clear_memory()
    assert not failures, failures


def test_each_epilogue_has_its_own_dispatch_choice():
    run_ranks(_choices_follow_the_epilogue, 2)


@pytest.fixture
def fresh_dispatch():
    dispatch.clear_memory()
    yield
    dispatch.clear_memory()


def test_the_mode_of_a_call_and_the_choice_it_runs(monkeypatch, fresh_dispatch):
    monkeypatch.delenv("FLUXLITE_AUTO_MODE", raising=False)
    cpu = torch.device("cpu")
    assert dispatch.call_mode(cpu) == "both"  # an eager call
    monkeypatch.setattr(workspace, "capturing", lambda device: True)  # as under CUDA-graph capture
    assert dispatch.call_mode(cpu) == "throughput"
    with dispatch.assume_mode("latency"):
        assert dispatch.call_mode(cpu) == "latency"
        with dispatch.assume_mode("both"):
            assert dispatch.call_mode(cpu) == "both"
        assert dispatch.call_mode(cpu) == "latency"
    monkeypatch.setattr(workspace, "capturing", lambda device: False)

    key = dispatch.Key("ag_gemm", dispatch.m_bucket(64), K, N, "float32", 2, "cpu", fluxlite.__version__)
    fused, seq = dispatch.Choice("fused", source="measured"), dispatch.Choice("sequential", source="measured")
    choices = dispatch.Choices.of(fused, seq, dispatch.Choice("sequential", source="measured"))
    assert choices.both is choices.latency is seq and not choices.uniform  # equal choices are one object
    dispatch._MEMORY[key] = choices
    assert dispatch.remembered(key) is seq and dispatch.describe(key, 0.0, cpu, torch.float32) is seq
    with dispatch.assume_mode("throughput"):
        assert dispatch.remembered(key) is fused and dispatch.describe(key, 0.0, cpu, torch.float32) is fused

    monkeypatch.setenv("FLUXLITE_AUTO_MODE", "throughput")
    assert dispatch.remembered(key) is seq  # the variable is read once per process...
    dispatch.clear_memory()  # ...and again after this
    dispatch._MEMORY[key] = choices
    assert dispatch.remembered(key) is fused
    with dispatch.assume_mode("latency"):  # the context wins over the variable
        assert dispatch.remembered(key) is seq
    dispatch._MEMORY[key] = seq  # a bare choice stands for every mode
    assert dispatch._MEMORY[key].uniform and dispatch.remembered(key) is seq

    monkeypatch.setenv("FLUXLITE_AUTO_MODE", "fast")
    dispatch.clear_memory()
    with pytest.raises(ValueError, match=r"FLUXLITE_AUTO_MODE must be one of \('throughput', 'latency', 'both'\)"):
        dispatch.call_mode(cpu)
    with pytest.raises(ValueError, match="mode must be one of .* got 'eager'"):
        with dispatch.assume_mode("eager"):
            pass

def test_a_repeated_call_asks_for_the_capture_state_only_where_its_choice_depends_on_it(monkeypatch, fresh_dispatch):
    """dispatch.eager_choice, what a repeated auto call runs: the same choice as dispatch.choose, and a
    capture query (a CUDA call on GPU) only where the mode's choice is not ``both``."""
    monkeypatch.delenv("FLUXLITE_AUTO_MODE", raising=False)
    asked = []
    monkeypatch.setattr(workspace, "capturing", lambda device: asked.append(device) is not None)  # False
    a = torch.empty(64, K)
    key = dispatch.Key("gemm_rs", dispatch.m_bucket(64), K, N, "float32", 2, "cpu", fluxlite.__version__)
    fused, seq = dispatch.Choice("fused", source="measured"), dispatch.Choice("sequential", source="measured")
    dispatch._MEMORY[key] = choices = dispatch.Choices.of(seq, fused, dispatch.Choice("sequential", source="measured"))
    assert dispatch.eager_choice(key, a) is choices.both is seq and asked == []  # eager or captured: both
    with dispatch.assume_mode("latency"):
        assert dispatch.eager_choice(key, a) is fused and len(asked) == 1
    with dispatch.assume_mode("throughput"):
        assert dispatch.eager_choice(key, a) is seq and len(asked) == 1
    dispatch._MEMORY[key] = choices = dispatch.Choices.of(fused, seq, dispatch.Choice("sequential", source="measured"))
    assert dispatch.eager_choice(key, a) is seq and len(asked) == 2  # a capture would take fused
    assert dispatch.choose(key, None, a, 0.0, None, 1.0) is seq
    monkeypatch.setattr(workspace, "capturing", lambda device: True)
    assert dispatch.eager_choice(key, a) is None  # under capture, choose() decides (the warm rule)
    assert dispatch.eager_choice(key, torch.empty(0, K)) is None  # no rows: choose()'s own rule


def test_a_repeated_call_finds_its_choice_by_one_look_up_until_what_it_depends_on_changes(monkeypatch, fresh_dispatch):
    """dispatch.eager_choice_of: the key and the choice are worked out once per call signature, and again
    when the choices change, the declared mode changes, inside a tuning block, or (where the choice
    depends on it) under capture; every answer equals eager_choice's at that moment."""
    monkeypatch.delenv("FLUXLITE_AUTO_MODE", raising=False)
    capturing = {"now": False, "asked": 0}

    def capture_query(device):
        capturing["asked"] += 1
        return capturing["now"]

    monkeypatch.setattr(workspace, "capturing", capture_query)
    a = torch.empty(64, K)
    key = dispatch.Key("gemm_rs", dispatch.m_bucket(64), K, N, "float32", 2, "cpu", fluxlite.__version__)
    made = []

    def key_of():
        made.append(key)
        return key

    def ask():
        got = dispatch.eager_choice_of(("gemm_rs", 64), key_of, a)
        want = dispatch.eager_choice(key, a)
        assert (got is None and want is None) or (got[0] is want and got[1] is key), (got, want)
        return None if got is None else got[0]

    assert ask() is None and made == []  # nothing remembered: no key is made
    fused, seq = dispatch.Choice("fused", source="measured"), dispatch.Choice("sequential", source="measured")
    dispatch._MEMORY[key] = dispatch.Choices.of(seq, fused, dispatch.Choice("sequential", source="measured"))
    assert ask() is seq and ask() is seq and len(made) == 1  # the second call: one look-up
    with dispatch.assume_mode("latency"):
        asked = capturing["asked"]
        assert ask() is fused and len(made) == 2 and capturing["asked"] > asked  # not yet warm: asks
        asked = capturing["asked"]
        assert ask() is fused and len(made) == 2 and capturing["asked"] == asked  # warm: a capture takes it too
        capturing["now"] = True
        assert ask() is fused and dispatch.choose(key, None, a, 0.0, None, 1.0) is fused  # as choose() under capture
        capturing["now"] = False
    assert ask() is seq and len(made) == 3  # back in the undeclared mode
    # Undeclared, with a throughput choice other than both: an eager call runs both, a capture the
    # throughput choice, so every call asks.
    dispatch._MEMORY[key] = dispatch.Choices.of(fused, seq, dispatch.Choice("sequential", source="measured"))
    asked = capturing["asked"]
    assert ask() is seq and ask() is seq and len(made) == 4 and capturing["asked"] >= asked + 2
    capturing["now"] = True
    assert ask() is None  # under capture choose() decides (the warm rule)
    capturing["now"] = False
    dispatch._MEMORY[key] = dispatch.Choices.same(fused)  # re-measured: the new choice at once
    assert ask() is fused and len(made) == 6
    with dispatch.tuning():  # the key will be measured again: choose() decides, nothing is kept
        assert ask() is None and ask() is None and len(made) == 8
    assert ask() is fused
    dispatch.clear_memory()
    assert ask() is None


@pytest.mark.parametrize("rows", [1, 7, 1000, 3923, 4096, 4300, 16384, 50000])
def test_a_keys_rows_are_its_buckets_centre_within_5_percent(rows):
    key = dispatch.Key.of_size("gemm_rs", 2, torch.empty(rows, 8), torch.empty(8, 8), rows)
    assert abs(key.rows - rows) <= 0.05 * rows + 0.5, (rows, key.rows)
    assert dispatch.Key.of_size("gemm_rs", 2, torch.empty(4096, 8), torch.empty(8, 8), 4096).rows == 4096


def test_rule(monkeypatch):
    cuda, cpu, bf16 = torch.device("cuda", 0), torch.device("cpu"), torch.bfloat16
    monkeypatch.setenv("FLUXLITE_WORKSPACE", "on")
    assert dispatch.rule(2, 1e12, cpu, torch.float32).impl == "sequential"
    assert dispatch.rule(2, 1e10, cuda, bf16).impl == "sequential"
    assert dispatch.rule(1, 1e12, cuda, bf16).impl == "sequential"
    assert dispatch.rule(2, 1e12, cuda, torch.float32).impl == "sequential"
    assert dispatch.rule(2, 1e12, cuda, bf16).impl == "fused"
    # From 4096 rows a smaller GEMM takes the fused path too (fused won on every preset shape there)
    assert dispatch.rule(2, 7e10, cuda, bf16, rows=4096).impl == "fused"
    assert dispatch.rule(2, 7e10, cuda, bf16, rows=2048).impl == "sequential"
    assert dispatch.rule(2, 5e10, cuda, bf16, rows=16384).impl == "sequential"
    # At more than two ranks GEMM-RS and GEMM-AllReduce take fused only from their own floor (3e11)
    from fluxlite.ops import AG, AR, RS

    assert RS.rule_min_flops_beyond_two == AR.rule_min_flops_beyond_two == 3e11 and AG.rule_min_flops_beyond_two == 0
    for world_size, flops, expected in [(4, 2.4e11, "sequential"), (3, 1e11, "sequential"), (4, 3.4e11, "fused"),
                                        (2, 1e11, "fused")]:
        for op in (RS, AR):
            assert dispatch.rule(world_size, flops, cuda, bf16, rows=8192,
                                 min_flops_beyond_two=op.rule_min_flops_beyond_two).impl == expected
    assert dispatch.rule(4, 1e11, cuda, bf16, rows=8192, min_flops_beyond_two=AG.rule_min_flops_beyond_two).impl == "fused"
    monkeypatch.setenv("FLUXLITE_WORKSPACE", "off")  # as without symmetric memory
    assert dispatch.rule(2, 1e12, cuda, bf16).impl == "decomposed"
    monkeypatch.setenv("FLUXLITE_AUTO", "sometimes")
    with pytest.raises(ValueError, match="FLUXLITE_AUTO must be"):
        dispatch.auto_mode()


def _rule_floors(rank: int, W: int) -> None:
    seen = []
    rule = dispatch.rule

    def recording_rule(world_size, flops, device, dtype, rows=0, min_flops_beyond_two=0.0):
        seen.append((min_flops_beyond_two, flops))
        return rule(world_size, flops, device, dtype, rows, min_flops_beyond_two)

    dispatch.rule = recording_rule
    gen = torch.Generator().manual_seed(rank)
    a, w = randn(gen, 2 * W, K, dtype=torch.float32), randn(gen, N, K, dtype=torch.float32)
    fluxlite.ag_gemm(a, w)
    fluxlite.gemm_rs(a, w)
    fluxlite.gemm_ar(a, w)
    flops = 2.0 * 2 * W * K * N
    assert seen == [(0.0, W * flops), (3e11, flops), (3e11, flops)], seen


def test_each_op_hands_the_rule_its_own_floor_beyond_two_ranks():
    """``auto`` without measuring (``FLUXLITE_AUTO=off``) asks the rule with the op's floor."""
    run_ranks(_rule_floors, 3, env={"FLUXLITE_AUTO": "off"})


def test_a_fused_path_without_the_gemm_kernel_is_one_candidate():
    """GEMM-AllReduce's one shot computes its partial with cuBLAS: timing each kernel config would
    measure the same call several times, and noise would give the modes different configs."""
    from types import SimpleNamespace

    from fluxlite.ops import AR
    from fluxlite.ops.gemm_ar import ONE_SHOT_MAX_BYTES

    cuda = torch.device("cuda", 0)
    every = dispatch.candidates(cuda, True)
    assert [c.impl for c in every].count("fused") == len(dispatch.GPU_CONFIGS) > 1
    one = dispatch.candidates(cuda, True, configs=())
    assert [(c.impl, c.config) for c in one] == [("sequential", None), ("fused", None), ("decomposed", None)]
    N, W = 8192, 2
    rows = ONE_SHOT_MAX_BYTES // ((W - 1) * N * 2)  # the most rows of bf16 that still go in one shot
    call = lambda m: SimpleNamespace(tp=SimpleNamespace(world_size=W), a=torch.empty(m, 64, dtype=torch.bfloat16),  # noqa: E731
                                     weight=torch.empty(N, 64, dtype=torch.bfloat16))
    assert AR.kernel_configs(call(1)) == () and AR.kernel_configs(call(rows)) == ()
    assert AR.kernel_configs(call(rows + 1)) == RS.kernel_configs(None), "two shots run the GEMM-RS kernel"
    # GEMM-RS's one shot likewise, up to its own bound on the bytes a rank reads
    from fluxlite.ops.gemm_rs import ONE_SHOT_MAX_BYTES as RS_BYTES

    rs_rows = W * (RS_BYTES // ((W - 1) * N * 2))  # the most rows (all ranks') that still go in one shot
    assert RS.kernel_configs(call(W)) == () and RS.kernel_configs(call(rs_rows)) == ()
    assert RS.kernel_configs(call(rs_rows + W)) == RS.kernel_configs(None)


def test_gemm_rs_measures_only_the_configs_its_kernel_holds():
    """Four stages do not fit GEMM-RS's fused tile loops (shared memory): auto never times them
    there, and a launch with one fails before it, naming the argument. The matmul consumer (no
    config) is measured first."""
    from types import SimpleNamespace

    from fluxlite.kernels import gemm_rs

    configs = RS.kernel_configs(None)
    assert configs == (None, *(c for c in dispatch.GPU_CONFIGS if c.num_stages <= 3))
    assert 0 < len(configs) - 1 < len(dispatch.GPU_CONFIGS)
    big = next(c for c in dispatch.GPU_CONFIGS if c.num_stages > gemm_rs.MAX_STAGES)
    with pytest.raises(ValueError, match="config: the GEMM-RS kernel holds at most 3 pipeline stages, got num_stages=4"):
        gemm_rs.launch(a=torch.empty(8, 8), weight=torch.empty(8, 8), out=None, bias=None, partial=None, recv=None,
                       blocks=None, tiles=None, peer_tiles=0, flags=None, sig=None, counters=None, error=None,
                       call=None, rank=0, world_size=2, sig_base=0, timeout_s=1.0, ep=None, config=big, cache={})


@given(st.integers(1, 1 << 20))
def test_m_buckets_are_contiguous_and_fine(rows):
    lo, hi = dispatch.bucket_rows(dispatch.m_bucket(rows))
    assert lo <= rows <= hi
    assert hi <= max(1.1 * lo, lo + 1)  # neighbours within ~9% share a measurement


@pytest.mark.timeout(240)
def test_fused_configs_compile_for_hopper():
    """Every config auto may pick compiles for sm_90 and fits an H100/H200 block's shared memory
    (the default's every variant is compiled by test_kernels_compile.py)."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']\n"
        "import compile_kernels as ck\nfrom fluxlite import dispatch\nfrom fluxlite.kernels import gemm_rs\n"
        "for cfg in dispatch.GPU_CONFIGS[1:]:\n"
        "    for name, fn, types, consts, *_ in list(ck.variants('bf16', cfg))[:2]:\n"
        "        if fn is gemm_rs.gemm_rs_kernel and cfg.num_stages > gemm_rs.MAX_STAGES:\n"
        "            continue  # never launched (its launch refuses it)\n"
        "        shared = ck.compile_kernel(fn, types, consts, cfg).metadata.shared\n"
        "        assert shared <= ck.SHARED_LIMIT, (cfg, name, shared)\n"
        "        print('ok', dispatch.config_label(cfg), name, shared)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", code, root], env=env, capture_output=True, text=True, timeout=230)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rs_configs = sum(c.num_stages <= 3 for c in dispatch.GPU_CONFIGS[1:])
    assert run.stdout.count("ok ") == len(dispatch.GPU_CONFIGS) - 1 + rs_configs, run.stdout


def test_a_captured_call_runs_its_modes_choice_only_where_it_ran_eagerly(monkeypatch, fresh_dispatch):
    """A fused call can be captured only after it ran eagerly with its shape: a capture (throughput
    mode) runs the throughput choice where it ran eagerly with those rows, else what the eager calls
    ran (``both``)."""
    monkeypatch.delenv("FLUXLITE_AUTO_MODE", raising=False)
    key = dispatch.Key("gemm_rs", dispatch.m_bucket(8), K, N, "float32", 2, "cpu", fluxlite.__version__)
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(fused, seq, seq)
    a8, a9 = torch.empty(8, K), torch.empty(9, K)

    def choose(a, capturing):
        monkeypatch.setattr(workspace, "capturing", lambda device: capturing)
        return dispatch.choose(key, None, a, 0.0, None, 1.0)

    assert choose(a8, False) is seq  # an eager call: both
    assert choose(a8, True) is seq  # fused never ran eagerly with 8 rows: what the warm-up ran
    with dispatch.assume_mode("throughput"):
        assert choose(a8, False) is fused  # a warm-up in the capture's mode
    assert choose(a8, True) is fused and choose(a9, True) is seq


def _device_modes_only(rank: int, W: int) -> None:
    from fluxlite.timing import LATENCY_CALLS, time_samples

    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))
    for host in (True, False):
        calls = []
        samples, batch = time_samples(timer, {"f": lambda x: calls.append(x)}, [None], rounds=3, warmup=0,
                                      batch_ms=1.0, max_batch=2, host=host)
        # the throughput batch, the eager batch after an untimed call, the latency calls, a host call if asked
        per_round = batch["n"] + 1 + batch["n"] + 1 + LATENCY_CALLS + host
        assert len(calls) == 2 + 3 * per_round, (host, len(calls), batch)  # 2: the probe's latency and host calls
        assert all(math.isnan(v) for v in samples["f"]["host"]) != host, (host, samples["f"]["host"])
        assert all(v >= 0 for v in samples["f"]["throughput"] + samples["f"]["latency"]), samples

    # eager: a batch back to back with nothing ahead of it, declared "both"; per call, the host's time
    # where it is the longer (on CPU the wall clock's): a call that sleeps in eager mode reads its timed
    # calls' sleeps (as long as they took: a loaded machine oversleeps), not the untimed call's
    import time

    slept = []

    def f(x):
        if timer.mode == "both":
            t0 = time.perf_counter()
            time.sleep(0.002)
            slept.append((time.perf_counter() - t0) * 1e3)

    samples, batch = time_samples(timer, {"f": f}, [None], rounds=3, warmup=0, batch_ms=1.0, max_batch=3)
    n = batch["n"]
    assert len(slept) == 3 * (n + 1), (len(slept), n)  # each round: the untimed call, then n timed ones
    for r, v in enumerate(samples["f"]["eager"]):
        timed = sum(slept[r * (n + 1) + 1 : (r + 1) * (n + 1)]) / n
        # 0.5 ms of slack: under the untimed call's share of a round (at least 2 ms / n, n <= 3)
        assert timed <= v < timed + 0.5, (r, v, timed, slept)
    assert all(v < 1.0 for v in samples["f"]["throughput"]), samples["f"]


def _latency_after_the_same_call(rank: int, W: int) -> None:
    from fluxlite.timing import LATENCY_CALLS, time_samples

    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))
    inputs = ["x", "y", "z"]
    seen = []
    fns = {name: (lambda x, name=name: seen.append((name, timer.mode, x))) for name in ("f", "g")}
    _, batch = time_samples(timer, fns, inputs, rounds=4, warmup=0, batch_ms=1.0, max_batch=2, host=False)
    rounds = seen[2 * len(fns):]  # after the probe's latency and host call of each
    n = batch["n"]
    per_name = n + (1 + n) + (1 + LATENCY_CALLS)
    assert LATENCY_CALLS >= 1 and len(rounds) == 4 * len(fns) * per_name, (len(rounds), batch)
    for i in range(0, len(rounds), per_name):
        name = rounds[i][0]
        part = rounds[i : i + per_name]
        assert {(nm, m) for nm, m, _ in part[:n]} == {(name, "throughput")}, part
        assert {(nm, m) for nm, m, _ in part[n : 2 * n + 1]} == {(name, "both")}, part  # eager, an untimed call first
        latency = part[2 * n + 1:]  # the untimed call, then the timed ones: all the same call
        assert len(set(latency)) == 1 and latency[0][:2] == (name, "latency"), part


def test_a_timed_latency_call_follows_the_same_call():
    """In latency mode the timed calls come right after an untimed call of the same callable, mode and
    input, as in a loop that waits for each call, not right after the throughput batch (where
    ``auto`` ran its other choice)."""
    run_ranks(_latency_after_the_same_call, 1)


def _later_start(rank: int, W: int) -> None:
    import time

    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))
    if rank == 1:  # this rank's sleep ahead of the batch ends 0.5 s after the others'
        timer._sleep = lambda ms: time.sleep(0.5)
    group = fluxlite.resolve_group().group

    def collective(x):  # each call meets the other ranks, as a fused call's waits do
        dist.all_reduce(torch.ones(1), group=group)

    ms, _ = timer.throughput(collective, [None], 0, 4, 1.0)
    everyone = timer.max_over_ranks([ms])[0]
    assert everyone < 30.0, f"rank {rank}: {ms:.1f} ms per call, {everyone:.1f} the most over the ranks"


def test_a_throughput_batch_does_not_time_a_rank_that_starts_it_later():
    """The ranks meet after the sleep queued ahead of a throughput batch: a rank whose sleep ends
    0.5 s later is not timed in the others' first call (4 calls: 125 ms a call if it were)."""
    run_ranks(_later_start, 2)


def test_time_samples_can_skip_the_host_mode_and_read_eager_calls_as_host_or_device_bound():
    """Without the host mode a round makes no host call (auto, which reads only the device modes, asks so).
    The eager reading of a round is the longer of the batch's device and host time per call."""
    run_ranks(_device_modes_only, 1)


def _warm_up_in_each_mode(rank: int, W: int) -> None:
    from fluxlite.timing import WARM_MODES, time_samples, warmup_calls

    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))
    inputs = ["x", "y", "z"]
    seen = []
    time_samples(timer, {"f": lambda x: seen.append((timer.mode, x))}, inputs, rounds=1, warmup=1, batch_ms=1.0,
                 max_batch=2)
    per_mode = warmup_calls(1, len(inputs))
    assert per_mode >= 4 * len(inputs), per_mode
    warm = seen[: len(WARM_MODES) * per_mode]
    for i, mode in enumerate(WARM_MODES):  # every input, in each mode, as often as a replay needs
        part = warm[i * per_mode : (i + 1) * per_mode]
        assert {m for m, _ in part} == {mode}, part
        assert all(sum(x == want for _, x in part) >= 4 for want in inputs), part
    assert warmup_calls(0, 3) == 0 and warmup_calls(20, 3) == 20


def _warm_up_meets_both_halves(rank: int, W: int) -> None:
    from fluxlite.timing import WARM_MODES, time_samples, warmup_calls

    timer = Timer(fluxlite.resolve_group(), torch.device("cpu"))
    for sets in (1, 2, 3, 4):
        for fused_callables in (1, 2, 3, 4):  # beside two that make no fused call
            inputs = [f"x{s}" for s in range(sets)]
            epoch = [0]  # the workspace's call count, which every fused call advances
            warm: dict[str, list] = {}

            def fused(x, name):
                epoch[0] += 1
                if len(warm.setdefault(name, [])) < len(WARM_MODES) * warmup_calls(1, sets):
                    warm[name].append((timer.mode, x, epoch[0] % 2))

            fns = {f"f{i}": (lambda x, name=f"f{i}": fused(x, name)) for i in range(fused_callables)}
            fns.update(g=lambda x: None, h=lambda x: None)
            time_samples(timer, fns, inputs, rounds=1, warmup=1, batch_ms=1.0, max_batch=2, host=False)
            for name, calls in warm.items():  # each input, in each mode, twice on each data half
                for mode in WARM_MODES:
                    for x in inputs:
                        for parity in (0, 1):
                            seen = calls.count((mode, x, parity))
                            assert seen >= 2, (sets, fused_callables, name, mode, x, parity, calls)


def test_the_warm_up_meets_each_input_on_both_data_halves():
    """Every callable's warm-up calls meet each input set on both data halves of the fused workspace
    twice, in each mode, however many callables make fused calls beside it: the second such call
    captures the replay that the timed rounds then launch."""
    run_ranks(_warm_up_meets_both_halves, 1)


def test_the_warm_up_runs_every_input_in_each_mode():
    """A callable that runs another implementation in each mode (``auto``) warms up both: its fused
    calls' replays are in place before the rounds that time them."""
    run_ranks(_warm_up_in_each_mode, 1)


@pytest.mark.parametrize("M,K,N,dtype,expected,activated", [
    (8192, 4096, 8192, torch.bfloat16, "torch", "triton"),    # 5.5e11 flops: cuBLAS per split
    (4096, 3072, 4096, torch.bfloat16, "triton", "triton"),   # 1.0e11: the kernel's one launch
    (1024, 5000, 1024, torch.bfloat16, "torch", "torch"),     # K off a multiple of 64, however small
    (6000, 5000, 3500, torch.bfloat16, "triton", "triton"),   # rows of 7000 bytes: cuBLAS is slow there
    (6000, 5000, 3500, torch.float32, "torch", "torch"),      # rows of 14000 bytes: whole 16-byte units
])
def test_matmul_consumer_rule(M, K, N, dtype, expected, activated):
    """A forced fused GEMM-RS, or AG-GEMM with pushed rows and no row scale, on CUDA runs the matmul
    consumer where cuBLAS's rows are whole 16-byte units and K is off 64 or (no activation) the GEMM
    is large (AG counts the gathered rows: ``M`` here, ``M/2`` per rank). With GELU (``activated``)
    the kernel, whose epilogue saves the activation's pass, unless K is off 64; SwiGLU always the
    kernel. A named config always runs the kernel; CPU runs the state's consumer. AG's pulled rows and
    row scales run the kernel."""
    from types import SimpleNamespace

    from fluxlite.epilogue import PLAIN, Epilogue
    from fluxlite.kernels.gemm_core import GemmConfig
    from fluxlite.ops.op import MATMUL_MIN_FLOPS

    assert 2 * 4096 * 3072 * 4096 < MATMUL_MIN_FLOPS <= 2 * 8192 * 4096 * 8192
    cuda = SimpleNamespace(ws=SimpleNamespace(is_cuda=True, world_size=2), consumer="triton")
    cpu = SimpleNamespace(ws=SimpleNamespace(is_cuda=False, world_size=2), consumer="torch")
    tp = SimpleNamespace(world_size=2)

    def args_of(rows, ep=PLAIN, weight_rows=N, K=K, **options):
        return SimpleNamespace(a=torch.empty(rows, K, dtype=dtype, device="meta"), tp=tp, ep=ep,
                               weight=torch.empty(weight_rows, K, dtype=dtype, device="meta"),
                               options=dict(dict(return_gathered=False, row_scale=None), **options))

    for op, rows in ((RS, M), (AG, M // 2)):
        args = args_of(rows)
        if op is RS and RS.call_is_one_shot(2, args):  # cuBLAS's GEMM, then the one-shot reduction kernel
            assert (op.consumer_of(cuda, args, None), op.kernel_configs(args)) == ("triton", ())
            continue
        assert op.consumer_of(cuda, args, None) == expected, op.name
        assert op.consumer_of(cuda, args, GemmConfig()) == "triton"
        assert op.consumer_of(cpu, args, None) == "torch"
        assert op.kernel_configs(args)[0] is None, "auto measures the matmul consumer too"
    for act in ("gelu", "gelu_tanh", "silu"):
        args = args_of(M // 2, Epilogue(act))
        assert AG.consumer_of(cuda, args, None) == activated, act
        assert AG.kernel_configs(args)[0] is None, "auto measures what a forced fused call runs, with an activation too"
    swiglu = args_of(M // 2, Epilogue("swiglu"), weight_rows=2 * N)
    assert AG.consumer_of(cuda, swiglu, None) == ("torch" if AG.pushes_by_sm(2, swiglu) else "triton")
    assert AG.kernel_configs(swiglu)[0] is None
    for args in (args_of(M // 2, return_gathered=True), args_of(M // 2, Epilogue(None, True)),
                 args_of(M // 2, Epilogue("gelu", True))):
        assert AG.consumer_of(cuda, args, None) == "triton", (args.options, args.ep)
        assert None not in AG.kernel_configs(args)
    # AG-GEMM whose rows the SMs push (a small call: at most SM_PUSH_MAX_BYTES a rank and fewer than
    # SM_PUSH_MAX_TILES output tiles): one cuBLAS GEMM after the gather, with any activation, where its
    # output rows are whole 16-byte units; not with pulled rows, row scales, a named config, rows off
    # whole 16-byte words or one rank
    from fluxlite.ops.ag_gemm import SM_PUSH_MAX_BYTES, SM_PUSH_MAX_TILES, WEIGHT_BOUND_ROWS, cut_rereads_weight

    size = torch.tensor([], dtype=dtype).element_size()
    small = max(m for m in range(1, 1 << 13) if AG.small_call(2, m, 64, N, size))  # rows of K = 64
    tiles = lambda m: -(-2 * m // 128) * -(-N // 256)  # noqa: E731
    assert tiles(small) < SM_PUSH_MAX_TILES or cut_rereads_weight(2, small, N)
    assert tiles(small + 1) >= SM_PUSH_MAX_TILES and not cut_rereads_weight(2, small + 1, N)
    assert AG.small_call(2, 1, SM_PUSH_MAX_BYTES // size, 8, size)
    assert not AG.small_call(2, 1, SM_PUSH_MAX_BYTES // size + 16 // size, 8, size), "over the bytes' bound"
    assert not AG.small_call(1, 1, 64, 8, size), "one rank"
    # over the tiles' bound: chunks of a GEMM that reads its weight for longer than it computes, whose
    # cut GEMMs would read a wide weight once per chunk for less than the gather they hide
    assert -(-2 * 128 // 128) * -(-28672 // 256) >= SM_PUSH_MAX_TILES and AG.small_call(2, 128, 8192, 28672, 2)
    assert AG.small_call(4, 64, 8192, 28672, 2) and AG.small_call(2, 192, 8192, 64128, 2)
    assert not AG.small_call(2, WEIGHT_BOUND_ROWS, 4096, 28672, 2), "a compute-bound GEMM's chunks: cut, overlapped"
    assert not AG.small_call(2, 300, 4096, 7680, 2), "a narrow weight: the gather hidden is worth more"
    assert not AG.small_call(2, 128, 65536, 28672, 2), "over the bytes' bound"
    assert not cut_rereads_weight(1, 8, 1 << 20) and cut_rereads_weight(3, 1, 64)
    whole_rows = N * size % 16 == 0
    for ep, w_rows in ((PLAIN, N), (Epilogue("gelu"), N), (Epilogue("swiglu"), 2 * N)):
        args = args_of(small, ep, weight_rows=w_rows, K=64)
        assert AG.consumer_of(cuda, args, None) == ("torch" if whole_rows else "triton"), ep
        assert AG.consumer_of(cuda, args, GemmConfig()) == "triton"
        assert AG.consumer_of(SimpleNamespace(ws=SimpleNamespace(is_cuda=True, world_size=1), consumer="triton"),
                              args, None) == AG.consumer_of(cuda, args_of(small + 1, ep, weight_rows=w_rows, K=64), None)
    for args in (args_of(small, return_gathered=True, K=64), args_of(small, Epilogue(None, True), K=64)):
        assert AG.consumer_of(cuda, args, None) == "triton"
    assert not AG.pushes_by_sm(2, args_of(3, K=1001 if size == 2 else 1003))  # rows off 16-byte words
