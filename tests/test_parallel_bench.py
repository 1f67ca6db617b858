"""scripts/bench_layers.py: a CPU smoke run (gloo, tiny Llama block) so the benchmark's own logic is
tested before it meets the GPUs. The real benchmark (2 GPUs, hidden 8192) is run by hand:

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --out bench_layers.json
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_train_gpt import ROOT, torchrun

SCRIPT = ROOT / "scripts" / "bench_layers.py"


def test_bench_layers_cpu_smoke(tmp_path: Path):
    out = tmp_path / "bench.json"
    proc = torchrun(SCRIPT, 2, "--device", "cpu", "--dtype", "fp32", "--hidden", "64", "--ffn", "96", "--heads", "8",
                    "--kv-heads", "2", "--seq", "32", "--batch", "2", "--warmup", "1", "--iters", "3",
                    "--modes", "sequential,fused,deferred", "--out", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"sequential", "fused", "deferred"} and res["baseline"] == "sequential", res
    assert res["accurate"] and res["results"]["fused"]["max_rel_err_vs_first"] < 1e-5, res
    # the deferred block (norms folded into QKV and fc1, SwiGLU in fc1's epilogue): same weights, fp32
    assert res["results"]["deferred"]["max_rel_err_vs_first"] < 1e-4, res
    assert len(res["results"]["fused"]["median_ms_per_rank"]) == 2 and "speedup fused over sequential" in log


def test_bench_layers_megatron_baseline_cpu_smoke(tmp_path: Path):
    """``--modes megatron,...``: the same block with megatron-core's own layers and the same weights,
    the baseline fluxlite is compared against; its first step must match fluxlite's."""
    import pytest

    pytest.importorskip("megatron.core")
    out = tmp_path / "bench.json"
    proc = torchrun(SCRIPT, 2, "--device", "cpu", "--dtype", "fp32", "--hidden", "64", "--ffn", "96", "--heads", "8",
                    "--kv-heads", "2", "--seq", "32", "--batch", "2", "--warmup", "1", "--iters", "2", "--rounds", "1",
                    "--modes", "megatron,fused", "--out", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    res = json.loads(out.read_text())
    assert res["baseline"] == "megatron" and set(res["results"]) == {"megatron", "fused"}, res
    assert res["accurate"] and res["results"]["fused"]["max_rel_err_vs_first"] < 1e-5, res
    assert "speedup fused over megatron" in log


def test_bench_gpt_cpu_smoke(tmp_path: Path):
    """scripts/bench_gpt.py: Megatron's GPTModel with fluxlite's layers against Megatron's own (the
    model-level benchmark), on gloo ranks: the first step must match Megatron's, and the report's
    figures must follow from its times."""
    import pytest

    pytest.importorskip("megatron.core")
    out = tmp_path / "bench_gpt.json"
    proc = torchrun(ROOT / "scripts" / "bench_gpt.py", 2, "--device", "cpu", "--dtype", "fp32", "--layers", "2",
                    "--hidden", "64", "--ffn", "96", "--heads", "8", "--kv-heads", "2", "--vocab", "128", "--seq", "32",
                    "--batch", "2", "--warmup", "1", "--iters", "2", "--rounds", "1", "--throughput-steps", "1",
                    "--modes", "megatron,fused,sequential", "--out", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"megatron", "fused", "sequential"} and res["accurate"], res
    for mode in ("fused", "sequential"):
        r, base = res["results"][mode], res["results"]["megatron"]
        assert r["max_rel_err_vs_megatron"] < 1e-5, res
        assert abs(r["speedup_throughput"] - base["throughput_ms"] / r["throughput_ms"]) < 1e-9, res
        assert abs(r["hidden_share_of_comm"] * res["comm_ms"]["step"] - r["hidden_vs_megatron_ms"]) < 1e-9, res
    comm = res["comm_ms"]
    assert 0 < comm["swapped_layers"] < comm["step"], comm
    assert "TP communication of a step" in log
