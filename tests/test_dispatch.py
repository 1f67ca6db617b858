"""Measured dispatch (fluxlite/dispatch.py): measuring on gloo ranks (forced with
``FLUXLITE_AUTO=measure``), the agreement step, the cache file (written, reloaded, corrupt), the
rule, the choice of the winner, and the fused kernel configs it may pick compiling for sm_90."""

from __future__ import annotations

import json
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
from fluxlite import dispatch

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
        assert set(e["times_ms"]) >= {"sequential", "decomposed", "fused"}, e
        assert all(t["throughput"] > 0 and t["latency"] > 0 for t in e["times_ms"].values()), e
        assert e["impl"] in e["times_ms"], e


@pytest.mark.timeout(120)
def test_cache_is_written_reloaded_and_agreed(tmp_path):
    env = {"FLUXLITE_CACHE_DIR": str(tmp_path)}
    run_ranks(_measure_then_reload, 2, "off", str(tmp_path), env=dict(env, FLUXLITE_AUTO="off"))
    run_ranks(_measure_then_reload, 2, "first", str(tmp_path), env=dict(env, FLUXLITE_AUTO="measure"))
    first = json.loads((tmp_path / "dispatch.json").read_text())
    run_ranks(_measure_then_reload, 2, "again", str(tmp_path), env=dict(env, FLUXLITE_AUTO="measure"))
    again = json.loads((tmp_path / "dispatch.json").read_text())
    assert again == first, "a run served from the cache must not measure or rewrite it"


def _entry(impl: str) -> dict:
    return dict(impl=impl, config=None, times_ms={})


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


def test_corrupt_and_foreign_cache_files_are_ignored_with_a_warning(tmp_path):
    path = tmp_path / "dispatch.json"
    for text, why in (("{ not json", "is not JSON"), ('{"schema": "other/9", "entries": {}}', "is not a fluxlite"),
                      ("[1, 2]", "is not a fluxlite")):
        path.write_text(text)
        with pytest.warns(RuntimeWarning, match=why):
            assert dispatch.load_cache(path) == {}
    good = dict(impl="fused", config=dict(vars(dispatch.GPU_CONFIGS[1])), times_ms={})
    foreign = {"a": dict(impl="bogus"), "b": dict(impl="fused", config=dict(block_m=7)),
               "c": dict(impl="fused", config=dict(vars(dispatch.GPU_CONFIGS[0]), block_k=16)), "d": "text"}
    _write(tmp_path, {"good": good, **foreign})
    with pytest.warns(RuntimeWarning, match="ignoring 4 foreign entries"):
        assert dispatch.load_cache(path) == {"good": good}
    assert dispatch.load_cache(tmp_path / "missing.json") == {}


def test_pick_minimises_the_worst_slowdown_over_both_modes():
    times = {"sequential": dict(throughput=10.0, latency=5.0), "decomposed": dict(throughput=9.0, latency=5.05),
             "fused": dict(throughput=8.0, latency=5.08)}
    order = list(times)
    assert dispatch.pick(times, order) == "fused"  # worst 1.016x, against 1.25x and 1.125x
    times["sequential"] = dict(throughput=8.05, latency=5.0)
    times["fused"] = dict(throughput=8.0, latency=5.0)  # better by 0.6%, within the tie margin: the earlier wins
    assert dispatch.pick(times, order) == "sequential"


def test_pick_never_takes_what_loses_to_sequential_in_either_mode():
    """Issue 10's bound: auto is never more than 2% slower than sequential in throughput or latency
    mode, so a fused call that wins one mode by far but loses the other (small shapes: latency won,
    throughput lost) is not chosen."""
    times = {"sequential": dict(throughput=10.0, latency=5.0), "fused": dict(throughput=10.3, latency=3.0)}
    assert dispatch.pick(times, list(times)) == "sequential"  # 3% slower in throughput
    times["fused"] = dict(throughput=10.15, latency=3.0)
    assert dispatch.pick(times, list(times)) == "fused"  # 1.5%: within the bound, and far better in latency
    times["fused"] = dict(throughput=6.0, latency=5.2)
    assert dispatch.pick(times, list(times)) == "sequential"  # 4% slower in latency
    del times["sequential"]  # sequential failed: the best of the rest
    times["decomposed"] = dict(throughput=7.0, latency=7.0)
    assert dispatch.pick(times, ["decomposed", "fused"]) == "fused"


def test_rule(monkeypatch):
    cuda, cpu, bf16 = torch.device("cuda", 0), torch.device("cpu"), torch.bfloat16
    monkeypatch.setenv("FLUXLITE_WORKSPACE", "on")
    assert dispatch.rule(2, 1e12, cpu, torch.float32).impl == "sequential"
    assert dispatch.rule(2, 1e10, cuda, bf16).impl == "sequential"
    assert dispatch.rule(1, 1e12, cuda, bf16).impl == "sequential"
    assert dispatch.rule(2, 1e12, cuda, torch.float32).impl == "sequential"
    assert dispatch.rule(2, 1e12, cuda, bf16).impl == "fused"
    monkeypatch.setenv("FLUXLITE_WORKSPACE", "off")  # as without symmetric memory
    assert dispatch.rule(2, 1e12, cuda, bf16).impl == "decomposed"
    monkeypatch.setenv("FLUXLITE_AUTO", "sometimes")
    with pytest.raises(ValueError, match="FLUXLITE_AUTO must be"):
        dispatch.auto_mode()


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
        "import compile_kernels as ck\nfrom fluxlite import dispatch\n"
        "for cfg in dispatch.GPU_CONFIGS[1:]:\n"
        "    for name, fn, types, consts in list(ck.variants('bf16', cfg))[:2]:\n"
        "        shared = ck.compile_kernel(fn, types, consts, cfg).metadata.shared\n"
        "        assert shared <= ck.SHARED_LIMIT, (cfg, name, shared)\n"
        "        print('ok', dispatch.config_label(cfg), name, shared)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", code, root], env=env, capture_output=True, text=True, timeout=230)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("ok ") == 2 * (len(dispatch.GPU_CONFIGS) - 1), run.stdout
