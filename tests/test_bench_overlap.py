"""scripts/bench_overlap.py: a CPU smoke run on 2 gloo ranks with tiny shapes, so the breakdown's
own logic (the preset-flag kernel launches, the transfer beside the GEMM, the rows it writes) is
tested before it meets the GPUs. The GPU run is by hand (its docstring). Interpreted kernels: the
shapes are tiny and every case runs a few times only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dist_utils import run_script

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_overlap.py"
CASES = {"cublas", "core", "kernel", "kernel+copy", "limit", "copy", "nccl", "sequential", "fused"}
MATMUL_CASES = {"splits", "splits+copy"}  # GEMM-RS's matmul consumer (the CPU's default consumer)


@pytest.mark.slow
def test_bench_overlap_cpu_smoke(tmp_path: Path):
    out = tmp_path / "overlap.json"
    runs = run_script(SCRIPT, 2, "--shapes", "ag:70,48,40", "rs:66,40,36", "--rounds", "1", "--sets", "1",
                      "--out", str(out), out_dir=tmp_path, env={"TRITON_INTERPRET": "1"})
    for r in runs[0]:
        assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["op"], r["M"], r["K"], r["N"]) for r in rows] == [("ag", 70, 48, 40), ("rs", 66, 40, 36)]
    for row in rows:
        assert set(row["times_ms"]) == CASES | (MATMUL_CASES if row["op"] == "rs" else set()) and not row["failed"], row
        assert all(t["throughput"] > 0 for t in row["times_ms"].values()), row
        assert row["rel_err"]["fused"] < 1e-5, row  # fp32 on CPU: the same products in another order
