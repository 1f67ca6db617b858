"""scripts/bench_layers.py and scripts/bench_gpt.py: CPU smoke runs (gloo, tiny Llama block) so the
benchmarks' own logic is tested before it meets the GPUs. The real benchmarks (2 GPUs, hidden 8192)
run by hand, or through scripts/gpu_suite.sh:

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --out bench_layers.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.dist_utils import run_script
from tests.gpu_utils import SAFE_ENV

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_layers.py"


def torchrun(script: Path, nproc: int, *args: str, out_dir: Path) -> tuple[list[int], str]:
    """The script on ``nproc`` ranks as torchrun would run it (``tests.dist_utils.run_script``):
    the ranks' exit codes and their output."""
    ranks = run_script(script, nproc, *args, out_dir=out_dir,
                       env={**SAFE_ENV, "FLUXLITE_TIMEOUT_S": os.environ.get("FLUXLITE_TIMEOUT_S", "60")})[0]
    return [r.returncode for r in ranks], "".join(r.stdout + r.stderr for r in ranks)


@pytest.mark.parametrize("block,layout", [("transformer", "sp"), pytest.param("mlp", "no-sp", marks=pytest.mark.slow)])
def test_bench_layers_cpu_smoke(tmp_path: Path, block: str, layout: str):
    """Every mode of the block (the whole block with sequence parallelism, or its MLP half alone
    without: the Row forward and the Column backward through GEMM-AllReduce) on 2 gloo ranks from
    the same weights, in one run: fluxlite's sequential, fused and deferred (norms folded into QKV
    and fc1, SwiGLU in fc1's epilogue) blocks, and, where megatron-core is installed, the same block
    with Megatron's own layers as the baseline (the first mode) that every other mode's first step
    must match."""
    import importlib.util

    megatron = importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core") is not None
    modes = (["megatron"] if megatron else []) + ["sequential", "fused", "deferred", "deferred-unfused-act"]
    out = tmp_path / "bench.json"
    codes, log = torchrun(SCRIPT, 2, "--device", "cpu", "--dtype", "fp32", "--hidden", "64", "--ffn", "96", "--heads", "8",
                    "--kv-heads", "2", "--seq", "32", "--batch", "2", "--warmup", "1", "--iters", "5", "--rounds", "1",
                    "--modes", ",".join(modes), "--block", block, "--out", str(out),
                    *(["--no-sequence-parallel"] if layout == "no-sp" else []), out_dir=tmp_path)
    assert codes == [0, 0], log[-4000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == set(modes) and res["baseline"] == modes[0], res
    assert res["config"]["block"] == block and ("no attention" in log) == (block == "mlp"), log[-2000:]
    assert res["config"]["sequence_parallel"] == (layout == "sp"), res["config"]
    assert res["accurate"], res
    for mode in modes[1:]:  # fp32, the same weights: the deferred fold rounds differently
        assert res["results"][mode]["max_rel_err_vs_first"] < (1e-4 if mode.startswith("deferred") else 1e-5), (mode, res)
    assert len(res["results"]["fused"]["median_ms_per_rank"]) == 2, res
    assert f"speedup fused over {modes[0]}" in log, log[-4000:]
    # 5 latency readings per mode: bounds of the paired speedups; 1 throughput round: none
    for mode in modes[1:]:
        (low, high), none = res["speedup_bounds"][mode]["latency"], res["speedup_bounds"][mode]["throughput"]
        assert 0 < low <= high and none == [None, None], (mode, res["speedup_bounds"][mode])


@pytest.mark.parametrize("layout", ["sp", "no-sp"])
def test_bench_gpt_cpu_smoke(tmp_path: Path, layout: str):
    """scripts/bench_gpt.py: Megatron's GPTModel with fluxlite's layers against Megatron's own (the
    model-level benchmark), on gloo ranks, with sequence parallelism and without (GEMM-AllReduce in
    the Row forward): the first step must match Megatron's, and the report's figures must follow from
    its times."""
    pytest.importorskip("megatron.core")
    out = tmp_path / "bench_gpt.json"
    codes, log = torchrun(ROOT / "scripts" / "bench_gpt.py", 2, "--device", "cpu", "--dtype", "fp32", "--layers", "2",
                    "--hidden", "64", "--ffn", "96", "--heads", "8", "--kv-heads", "2", "--vocab", "128", "--seq", "32",
                    "--batch", "2", "--warmup", "1", "--iters", "2", "--rounds", "1", "--throughput-steps", "1",
                    "--modes", "megatron,fused,sequential", "--ceiling", "--out", str(out),
                    *(["--no-sequence-parallel"] if layout == "no-sp" else []), out_dir=tmp_path)
    assert codes == [0, 0], log[-4000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"megatron", "fused", "sequential", "ceiling"} and res["accurate"], res
    # the ceiling: Megatron's step with its TP collectives skipped (every one of them, not compared)
    ceiling = res["results"]["ceiling"]
    tp_collectives = {"all_reduce"} if layout == "no-sp" else {"all_gather_into_tensor", "reduce_scatter_tensor"}
    assert tp_collectives <= set(ceiling["skipped_per_step"]) and ceiling["max_rel_err_vs_megatron"] is None, ceiling
    for mode in ("fused", "sequential"):
        r, base = res["results"][mode], res["results"]["megatron"]
        assert r["max_rel_err_vs_megatron"] < 1e-5, res
        assert abs(r["speedup_throughput"] - base["throughput_ms"] / r["throughput_ms"]) < 1e-9, res
        assert r["speedup_latency_bounds"] == r["speedup_throughput_bounds"] == [None, None], r  # 2 and 1 readings
        assert abs(r["hidden_share_of_comm"] * res["comm_ms"]["step"] - r["hidden_vs_megatron_ms"]) < 1e-9, res
    comm = res["comm_ms"]
    assert 0 < comm["swapped_layers"] < comm["step"], comm
    assert ("all_reduce" in comm) == (layout == "no-sp") and res["config"]["sequence_parallel"] == (layout == "sp")
    assert "TP communication of a step" in log
    assert ("without sequence parallelism" in log) == (layout == "no-sp"), log[-2000:]
