"""2-rank CPU (gloo) runs of the tensor-parallel layers exit cleanly, run after run.

A script whose last collective comes right before the end (here: the sequential ops in the layers'
last backward, ``overlap="auto"`` on CPU) used to end, now and then, with ``terminate called
without an active exception`` (SIGABRT, torchrun rc 1) after ``destroy_process_group()``: a gloo
worker thread releases a finished collective (Python-wrapped tensors, and inside a backward the
Python context that autograd keeps in thread-local storage) only after the caller's ``wait()`` has
returned, and that takes the GIL; once CPython is finalizing, CPython < 3.14 ends such a thread
with ``pthread_exit`` inside a noexcept C++ destructor, which is ``std::terminate``. The layers
keep the process group alive past ``destroy_process_group()``, so its threads are not joined first.

Each run is short and exits right after its last backward, where the race window is. Ten runs in
a row, each must exit 0 with no ``terminate called`` on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = 10

LAYERS_SCRIPT = """
import torch
import torch.distributed as dist

import fluxlite
from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

torch.set_num_threads(1)
tp = fluxlite.init("gloo")
torch.manual_seed(0)
cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float32)
h, ffn, s, b = 64, 256, 16, 2
fc1 = ColumnParallelLinear(h, ffn, config=cfg, init_method=torch.nn.init.xavier_normal_, bias=True,
                           gather_output=False, overlap="auto")
fc2 = RowParallelLinear(ffn, h, config=cfg, init_method=torch.nn.init.xavier_normal_, bias=True,
                        input_is_parallel=True, skip_bias_add=False, overlap="auto")
for step in range(3):
    x = torch.randn(s // tp.world_size, b, h, requires_grad=True)
    y, _ = fc2(torch.nn.functional.gelu(fc1(x)[0]))
    y.sum().backward()  # ends with fc1's dgrad reduce-scatter: a gloo collective inside a backward
fluxlite.release_workspaces()
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_layers_runs_exit_cleanly(tmp_path):
    script = tmp_path / "layers_exit.py"
    script.write_text(LAYERS_SCRIPT)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               OMP_NUM_THREADS="1", FLUXLITE_TIMEOUT_S="30")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)]
    start = time.monotonic()
    for run in range(RUNS):
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        where = f"run {run + 1} of {RUNS} (rc {proc.returncode}, {time.monotonic() - start:.1f} s in)"
        assert "terminate called" not in proc.stderr, f"{where}: a rank aborted at exit:\n{proc.stderr[-6000:]}"
        assert proc.returncode == 0, f"{where}: torchrun failed:\n{proc.stderr[-6000:]}"
