"""scripts/bench_inference.py: a CPU smoke run (2 gloo ranks, a tiny decoder stack) so the benchmark's
own logic is tested before it meets the GPUs, and its answer to bad arguments. The real benchmark
(2 GPUs, Llama-3-70B widths, CUDA graphs) is run by hand:

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --out bench_inference.json

Tolerance: every implementation's stack output against sequential's, norm-relative, at most 1e-5 in
fp32 (the same products summed in another order; a lost or doubled chunk is off by order 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_train_gpt import ROOT, load_script, torchrun

SCRIPT = ROOT / "scripts" / "bench_inference.py"
IMPLS = {"sequential", "fused", "auto"}
FP32_TOL = 1e-5


@pytest.mark.slow
def test_bench_inference_cpu_smoke(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FLUXLITE_AUTO", "measure")  # auto measures on CPU too: its choices are reported
    monkeypatch.setenv("FLUXLITE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    proc = torchrun(SCRIPT, 2, "--device", "cpu", "--dtype", "fp32", "--hidden", "64", "--ffn", "96", "--heads", "8",
                    "--kv-heads", "2", "--layers", "2", "--prefill", "16", "--decode", "1,4", "--context", "8",
                    "--warmup", "1", "--rounds", "5", "--out", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Llama-style decoder stack, forward: 2 layers" in log and "vs seq" in log, log[-4000:]
    res = json.loads(out.read_text())
    meta = res["meta"]
    assert meta["world_size"] == 2 and meta["dtype"] == "fp32" and meta["layers"] == 2 and meta["graphs"] is False
    assert {"device", "torch", "triton", "fluxlite", "date", "command", "git_commit", "widths"} <= set(meta), meta
    assert "bench_inference.py" in meta["command"] and res["accurate"] and res["failed"] == {}, res
    assert [(c["name"], c["phase"], c["tokens"], c["layout"]) for c in res["cases"]] == [
        ("prefill-16", "prefill", 16, "sp"), ("decode-1", "decode", 1, "replicated"), ("decode-4", "decode", 4, "sp")]
    for case in res["cases"]:
        r = case["results"]
        assert set(r) == IMPLS and case["failed"] == {}, case
        base = r["sequential"]
        assert base["latency_vs_sequential"] == base["throughput_vs_sequential"] == 1.0, case
        for impl, x in r.items():
            assert x["rel_err_vs_sequential"] <= FP32_TOL and x["rel_err_vs_eager_sequential"] <= FP32_TOL, (impl, x)
            assert x["latency_ms_per_layer"] > 0 and x["throughput_ms_per_layer"] > 0 and x["graph"] is False, x
            want = x["latency_ms_per_layer"] / base["latency_ms_per_layer"]
            assert x["latency_vs_sequential"] == pytest.approx(want, rel=1e-9), (case["name"], impl)
            for mode in ("latency", "throughput"):  # paired per-round ratios' bounds: finite from 5 rounds
                low, high = x[f"{mode}_vs_sequential_bounds"]
                assert 0 < low <= high, (case["name"], impl, mode, low, high)
                assert impl != "sequential" or low == high == 1.0, (case["name"], mode, low, high)
        # Every fluxlite op of the case was measured, and has a choice per mode: the four linear
        # layers' where sequence parallel, the Row layers' GEMM-AllReduce where replicated
        choices = case["auto_choices"]
        assert set(choices) == ({"qkv", "proj", "fc1", "fc2"} if case["layout"] == "sp" else {"proj", "fc2"}), choices
        assert all(set(c) == {"throughput", "latency", "both"} and all(v.endswith("(measured)") for v in c.values())
                   for c in choices.values()), choices


@pytest.fixture(scope="module")
def script():
    """The script as a module (its argument parsing runs in this process: no torch import to wait for)."""
    return load_script(SCRIPT)


@pytest.mark.parametrize("argv,env,says", [
    (["--prefill", "512,0"], {}, "--prefill: expected a comma list of positive integers, got '512,0'"),
    (["--decode", "1,x"], {}, "--decode: expected a comma list of positive integers, got '1,x'"),
    (["--layers", "-1"], {}, "--layers: expected a positive integer, got -1"),
    (["--context", "0", "--device", "cpu"], {}, "--context: expected a positive integer, got 0"),
    (["--device", "cpu", "--heads", "6", "--kv-heads", "2", "--hidden", "96"], {"WORLD_SIZE": "4"},
     "--heads (6) must be divisible by the number of ranks (4)"),
    (["--device", "cpu", "--prefill", "6,8"], {"WORLD_SIZE": "4"},
     "divisible by the number of ranks (4) for sequence parallelism, got 6"),
    (["--device", "cpu", "--impls", "fused,auto"], {}, "with sequential (the baseline)"),
    (["--device", "cpu", "--impls", "sequential,torch_symm_mem"], {}, "torch_symm_mem runs on CUDA only"),
])
def test_bad_arguments_give_one_line_from_rank_0_and_exit_2(script, argv, env, says, monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exc:
        script.parse_args(argv)
    err = capsys.readouterr()
    assert exc.value.code == 2 and err.out == "", err
    assert err.err.count("\n") == 1 and err.err.startswith("bench_inference.py: error:") and says in err.err, err.err
    monkeypatch.setenv("RANK", "1")  # another rank reaches the same verdict and leaves quietly
    with pytest.raises(SystemExit) as exc:
        script.parse_args(argv)
    assert exc.value.code == 0 and capsys.readouterr() == ("", ""), argv
