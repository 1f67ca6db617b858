"""scripts/trace_calls.py: the breakdown of a call's device timeline, recovered from random timelines
whose figures are known by construction; the names it sorts into GEMMs, waits and copies; a CPU smoke
run on two gloo ranks (no device events there); and its answer to bad arguments. The GPU run:

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ar:8192,4096,8192
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from tests.test_train_gpt import ROOT, load_script, torchrun

SCRIPT = ROOT / "scripts" / "trace_calls.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def _timeline(rng: random.Random, calls: int) -> tuple[list[dict], list[dict]]:
    """``(events, figures)``: ``calls`` whole calls (and the start of one more), each an alignment kernel,
    a random number of GEMMs on stream 7 with random gaps and a wait between some, copies on stream
    9 beside them and a GEMM-named kernel on another stream (which must not count); ``figures``: what
    :func:`call_breakdown` must find for each whole call."""
    events, figures, t = [], [], 0.0

    def add(name, ts, dur, stream, cat="kernel"):
        events.append(dict(name=name, ts=ts, dur=dur, cat=cat, ph="X", args=dict(stream=stream)))

    for _ in range(calls):
        start = t
        add("align_kernel", t, 4.0, 7)
        t += 4.0 + rng.uniform(0.2, 3.0)
        first, gemm, between, copies = t, 0.0, 0.0, 0.0
        for g in range(rng.randint(1, 5)):
            if g:
                gap = rng.uniform(0.5, 6.0)
                if rng.random() < 0.5:  # a bounded wait kernel inside the gap
                    add("split_wait_kernel", t + gap / 4, gap / 2, 7)
                t += gap
                between += gap
            dur = rng.uniform(20.0, 200.0)
            add("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNT", t, dur, 7)
            copy = rng.uniform(5.0, 90.0)
            add("Memcpy PtoP (Device -> Device)", t + 1.0, copy, 9, cat="gpu_memcpy")
            copies += copy
            t += dur
            gemm += dur
        add("ncclDevKernel_gemm_named_on_another_stream", first, 10.0, 11)
        last = t
        tail = rng.uniform(1.0, 150.0)
        add("memcpy128", t + tail / 2, tail / 4, 7)  # a copy within the GPU after the GEMMs
        copies += tail / 4
        t += tail
        figures.append(dict(period=t - start, gemm=gemm, before=first - start, between=between, after=t - last,
                            copies=copies))
    add("align_kernel", t, 4.0, 7)  # the next call's start: it makes the last call whole
    add("nvjet_sm90_after_the_last_start", t + 5.0, 50.0, 7)  # part of no whole call
    return events, figures


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_breakdown_recovers_each_calls_figures(script, seed):
    rng = random.Random(seed)
    events, figures = _timeline(rng, rng.randint(2, 5))
    rng.shuffle(events)  # a trace's events come in any order
    got = script.call_breakdown(script.device_events(dict(traceEvents=events)))
    assert len(got) == len(figures)
    for g, want in zip(got, figures):
        assert set(g) == set(script.FIGURES)
        for f in script.FIGURES:
            assert math.isclose(g[f], want[f], rel_tol=1e-9, abs_tol=1e-6), (f, g, want)
    med = script.medians(got)
    for f in script.FIGURES:
        assert med[f] == pytest.approx(statistics.median(w[f] for w in figures), rel=1e-9), f


def test_a_call_without_a_gemm_on_its_stream_has_no_compute_figures(script):
    events = [dict(name="align_kernel", ts=0.0, dur=4.0, cat="kernel", ph="X", args=dict(stream=7)),
              dict(name="nvjet_gemm", ts=5.0, dur=40.0, cat="kernel", ph="X", args=dict(stream=3)),
              dict(name="Memcpy DtoD", ts=6.0, dur=8.0, cat="gpu_memcpy", ph="X", args=dict(stream=9)),
              dict(name="align_kernel", ts=60.0, dur=4.0, cat="kernel", ph="X", args=dict(stream=7))]
    (row,) = script.call_breakdown(script.device_events(dict(traceEvents=events)))
    assert row["period"] == 60.0 and row["gemm"] == 0.0 and row["copies"] == 8.0, row
    assert all(math.isnan(row[f]) for f in ("before", "between", "after")), row
    assert script.call_breakdown(script.device_events(dict(traceEvents=events[:3]))) == []  # no next start


@pytest.mark.parametrize("name,cat,kind", [
    ("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNT", "kernel", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "kernel", "gemm"),
    ("ag_gemm_kernel", "kernel", "gemm"),
    ("align_kernel", "kernel", "align"),
    ("push_rows_kernel", "kernel", "align"),  # AG-GEMM's small calls start with the SMs' gather
    ("split_wait_kernel", "kernel", "wait"),
    ("gather_end_kernel", "kernel", "copy"),
    ("Memcpy PtoP (Device -> Device)", "gpu_memcpy", "copy"),
    ("memcpy128", "kernel", "copy"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", "other"),
])
def test_device_events_are_sorted_by_name_and_category(script, name, cat, kind):
    assert script.kind_of(dict(name=name, cat=cat)) == kind


def test_cpu_smoke_run_says_there_are_no_device_events():
    proc = torchrun(SCRIPT, 2, "--shapes", "ar:8,16,24", "rs:8,16,24", "--calls", "2", "--warmup", "1", "--graph")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    for label in ("AR 8x16->24", "RS 8x16->24"):
        for rank in (0, 1):
            assert f"== {label} rank {rank}: throughput ms cublas" in log, log[-4000:]
    assert log.count("no whole fused call among the device events (CPU ranks record none)") == 4, log[-4000:]


@pytest.mark.parametrize("argv,env,says", [
    (["--shapes", "rs:63,32,48"], {"WORLD_SIZE": "2"}, "M (63) must be divisible by the number of ranks (2)"),
    (["--shapes", "rs:64,32,48", "--calls", "1"], {}, "--calls: a whole call needs the next one's start"),
    (["--shapes", "xx:1,2,3"], {}, "--shapes: expected M,K,N or"),
    (["--shapes", "ar:8,16,24", "--warmup", "0"], {}, "--warmup: must be positive, got 0"),
])
def test_bad_arguments_give_one_line_and_exit_2(script, argv, env, says, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exc:
        script.parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err
