"""scripts/train_gpt.py --check under torchrun: the TP model's loss curve equals the single-process
nn.Linear twin's (CPU: gloo, float32, tight; GPU: nccl, bfloat16 tolerance)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_gpt.py"


def torchrun(script: Path, nproc: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node nproc script args`` from the repository root."""
    from tests.gpu_utils import SAFE_ENV  # never NVLink multicast on the shared GPU machines

    env = dict(os.environ, **SAFE_ENV, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               FLUXLITE_TIMEOUT_S=os.environ.get("FLUXLITE_TIMEOUT_S", "60"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(script), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _assert_passed(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"train_gpt --check failed (rc {proc.returncode}):\n{out[-6000:]}"
    assert "--check:" in out and ": PASS" in out, out[-6000:]
    return out


@pytest.mark.parametrize("extra", [("--overlap", "fused"), ("--no-sequence-parallel",)], ids=["sp-fused", "no-sp"])
def test_check_cpu_2_ranks(extra):
    out = _assert_passed(torchrun(SCRIPT, 2, "--check", "--no-progress", "--device", "cpu", "--steps", "20", *extra))
    assert "TP=2 on cpu (gloo), fp32" in out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,overlap,tol", [("bf16", "sequential", None), ("bf16", "fused", None),
                                               ("fp32", "sequential", "1e-4")])
def test_check_gpu_2_ranks(dtype, overlap, tol):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    args = ["--device", "cuda", "--dtype", dtype, "--overlap", overlap, "--steps", "30",
            "--hidden", "256", "--heads", "8", "--seq", "256", "--batch", "8", "--vocab", "512"]
    if tol:
        args += ["--tol", tol]
    out = _assert_passed(torchrun(SCRIPT, 2, "--check", "--no-progress", *args, timeout=600))
    assert f"TP=2 on cuda (nccl), {dtype}" in out
