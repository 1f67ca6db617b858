"""scripts/train_gpt.py --check under torchrun: the TP model's loss curve equals the single-process
nn.Linear twin's (CPU: gloo, float32, tight; GPU: nccl, bfloat16 tolerance). Without torchrun it
says how to launch it; bad arguments give one line and exit 2 (rank 0 only); every option has help."""

from __future__ import annotations

import argparse
import importlib.util
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


def load_script(path: Path):
    """The script at ``path`` imported as a module (its ``main`` and parser, without running it)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_script():
    return load_script(SCRIPT)


def test_without_torchrun_it_says_how_to_launch_it(capsys, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exc:
        _load_script().main(["--steps", "2"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("train_gpt.py: error: run it under torchrun") and "--nproc-per-node" in err, err


def test_every_option_has_help():
    parser = _load_script().build_parser()
    options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert len(options) > 15 and not [a.option_strings for a in options if not (a.help or "").strip()]


@pytest.mark.parametrize("argv,names", [
    (["--heads", "3"], "--heads (3) must be divisible by the number of ranks (2)"),
    (["--hidden", "66"], "--hidden (66) must be divisible by --heads (4)"),
    (["--steps", "0"], "--steps: must be positive, got 0"),
    (["--lr", "-1"], "--lr: must be positive"),
    (["--check", "--steps", "5"], "--check compares at least"),
    (["--overlap", "nope"], "invalid choice"),
])
def test_bad_arguments_give_one_line_from_rank_0(argv, names, capsys, monkeypatch):
    script = _load_script()
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, code, lines in (("1", 0, 0), ("0", 2, 1)):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exc:
            script.parse_args(argv)
        err = capsys.readouterr().err
        assert exc.value.code == code and err.count("\n") == lines, (rank, err)
    assert err.startswith("train_gpt.py: error:") and names in err, err


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
