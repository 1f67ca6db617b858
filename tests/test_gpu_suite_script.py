"""``scripts/gpu_suite.sh tests``: which GPUs and world size each GPU test file gets, and the exit
status, with ``python3`` replaced by a recorder (no GPU needed: the script's scheduling is bash).

From four GPUs on, the files run in lanes of two GPUs at once (their tests take two ranks), and
``tests/test_world_sizes.py`` (whose cases take every GPU) alone after them; below four, one file
after another on every GPU, as before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDER = """#!/bin/bash
echo "${CUDA_VISIBLE_DEVICES-all} ${FLUXLITE_GPU_RANKS} ${@: -1}" >> "$RECORD"
[[ ${@: -1} == *fails* ]] && exit 1
exit 0
"""
FILES = ["tests/a.py", "tests/b.py", "tests/test_world_sizes.py", "tests/c.py"]


def _run(tmp_path: Path, nproc: int, files: list[str], visible: str | None = None) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(RECORDER)
    (bin_dir / "python3").chmod(0o755)
    record = tmp_path / "record.txt"
    record.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "FLUXLITE_GPU_RANKS")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", NPROC=str(nproc), OUT=str(tmp_path / "out"), RECORD=str(record),
               MEGATRON_WHEELS=str(tmp_path / "no_wheels"), GPU_TESTS=" ".join(files))
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    proc = subprocess.run(["bash", "scripts/gpu_suite.sh", "tests"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, sorted(record.read_text().splitlines())


def test_four_gpus_run_the_files_in_two_lanes_and_the_world_size_file_alone(tmp_path):
    rc, calls = _run(tmp_path, 4, FILES)
    assert rc == 0
    assert calls == ["0,1 2 tests/a.py", "0,1 2 tests/c.py", "2,3 2 tests/b.py", "all 4 tests/test_world_sizes.py"]


def test_lanes_take_their_gpus_from_cuda_visible_devices(tmp_path):
    rc, calls = _run(tmp_path, 6, ["tests/a.py", "tests/b.py", "tests/c.py", "tests/test_world_sizes.py"],
                     visible="4,5,6,7,1,2")
    assert rc == 0
    assert calls == ["1,2 2 tests/c.py", "4,5 2 tests/a.py", "4,5,6,7,1,2 6 tests/test_world_sizes.py",
                     "6,7 2 tests/b.py"]


@pytest.mark.parametrize("nproc", [2, 3])
def test_below_four_gpus_every_file_gets_every_gpu(tmp_path, nproc):
    rc, calls = _run(tmp_path, nproc, FILES)
    assert rc == 0
    assert calls == sorted(f"all {nproc} {f}" for f in FILES)


@pytest.mark.parametrize("nproc", [2, 4])
def test_a_failing_file_fails_the_run(tmp_path, nproc):
    rc, calls = _run(tmp_path, nproc, ["tests/a.py", "tests/fails.py", "tests/b.py"])
    assert rc == 1 and len(calls) == 3
