"""The main job (README Quick start, first command) runs end to end on 2 CPU ranks under torchrun."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_demo_runs_checks_and_times_every_impl_under_torchrun():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "fluxlite.demo", "--M", "192", "--K", "96", "--N", "64", "--iters", "2", "--warmup", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("ag_gemm", "gemm_rs"))]
    seen = {(r[0], r[1]): r for r in rows}
    for op in ("ag_gemm", "gemm_rs"):
        for impl in ("sequential", "fused", "auto"):
            row = seen.get((op, impl))
            assert row is not None, f"no row for {op}/{impl} in:\n{proc.stdout}"
            assert row[-1] == "ok", row
            assert float(row[2]) > 0, row
