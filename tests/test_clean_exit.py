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
once (forked before any thread or process group exists), so a run costs about a second instead of
three interpreters' start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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

# python launcher.py SCRIPT RUNS OUT_DIR: per run, fork 2 ranks that run SCRIPT as __main__ and then
# leave the interpreter the normal way; print each rank's exit code (negative: killed by that signal).
LAUNCHER = """
import json, os, socket, sys
import torch, torch._dynamo, torch.distributed, fluxlite, fluxlite.parallel  # once, before any rank forks

script, runs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
code = compile(open(script).read(), script, "exec")
results = []
for run in range(runs):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pids = []
    for rank in range(2):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the rank: its own stderr file, torchrun's variables, the script, a normal exit
            fd = os.open(os.path.join(out, f"run{run}_rank{rank}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), MASTER_PORT=str(port))
            del results, pids
            exec(code, {"__name__": "__main__", "__file__": script})
            sys.exit(0)
        pids.append(pid)
    results.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
print(json.dumps(results))
"""


@pytest.mark.timeout(120)
def test_layers_runs_exit_cleanly(tmp_path):
    script, launcher = tmp_path / "layers_exit.py", tmp_path / "launch.py"
    script.write_text(LAYERS_SCRIPT)
    launcher.write_text(LAUNCHER)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               OMP_NUM_THREADS="1", FLUXLITE_TIMEOUT_S="30", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1")
    proc = subprocess.run([sys.executable, str(launcher), str(script), str(RUNS), str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, f"the launcher failed:\n{proc.stderr[-6000:]}"
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(codes) == RUNS
    for run, ranks in enumerate(codes):
        for rank, rc in enumerate(ranks):
            err = (tmp_path / f"run{run}_rank{rank}.err").read_text()
            where = f"run {run + 1} of {RUNS}, rank {rank} (exit code {rc})"
            assert "terminate called" not in err, f"{where}: the rank aborted at exit:\n{err[-6000:]}"
            assert rc == 0, f"{where}: the rank failed:\n{err[-6000:]}"
