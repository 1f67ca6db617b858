"""2-rank CPU (gloo) runs of the tensor-parallel layers exit cleanly, run after run.

A script whose last collective comes right before the end (here: the sequential ops in the layers'
last backward, ``overlap="auto"`` on CPU) can end, now and then, with ``terminate called
without an active exception`` (SIGABRT, torchrun rc 1) after ``destroy_process_group()``: a gloo
worker thread releases a finished collective (Python-wrapped tensors, and inside a backward the
Python context that autograd keeps in thread-local storage) only after the caller's ``wait()`` has
returned, and that takes the GIL; once CPython is finalizing, CPython < 3.14 ends such a thread
with ``pthread_exit`` inside a noexcept C++ destructor, which is ``std::terminate``. The layers
keep the process group alive past ``destroy_process_group()``, so its threads are not joined first.

Each run is short and exits right after its last backward, where the race window is. Every rank
of every run must exit 0 with no ``terminate called`` on stderr. The ranks are real interpreters
that finish as any script does (atexit, thread clean-up, interpreter finalisation), with torchrun's
environment variables; they are forked, two per run, by a launcher that imported torch and fluxlite
once (``tests.dist_utils.run_script``: forked before any thread or process group exists), so a run
costs a fraction of a second instead of three interpreters' start-up.
"""

from __future__ import annotations

import sys

import pytest

from .dist_utils import run_script

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
    results = run_script(script, 2, out_dir=tmp_path, runs=RUNS, timeout=110,
                         preload=["torch", "torch._dynamo", "torch.distributed", "fluxlite", "fluxlite.parallel"],
                         env={"OMP_NUM_THREADS": "1", "FLUXLITE_TIMEOUT_S": "30"})
    assert len(results) == RUNS
    for run, ranks in enumerate(results):
        for rank, (rc, _, err) in enumerate(ranks):
            where = f"run {run + 1} of {RUNS}, rank {rank} (exit code {rc})"
            assert "terminate called" not in err, f"{where}: the rank aborted at exit:\n{err[-6000:]}"
            assert rc == 0, f"{where}: the rank failed:\n{err[-6000:]}"


_ORPHANS = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from fluxlite.group import die_with_parent
for asks in (True, False):
    if os.fork() == 0:
        if asks:
            die_with_parent()
        print(int(asks), os.getpid(), flush=True)
        time.sleep(120)
        os._exit(0)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # ended, not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_rank_ends_with_the_process_that_started_it():
    """Ranks that the test harness or the profiler spawns call ``fluxlite.group.die_with_parent``:
    killed with its parent (a pytest or a profiler killed outright), a rank does not stay behind
    spinning; a process that did not ask stays."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    parent = subprocess.Popen([sys.executable, "-c", _ORPHANS, str(Path(__file__).resolve().parents[1])],
                              stdout=subprocess.PIPE, text=True)
    pids = dict(map(int, parent.stdout.readline().split()) for _ in range(2))  # asked (1) or not (0) -> pid
    asked, other = pids[1], pids[0]
    try:
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while not _gone(asked) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(asked), "the rank outlived its parent"
        assert not _gone(other), "a process that did not ask ended too: the check proves nothing"
    finally:
        for pid in (asked, other):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
