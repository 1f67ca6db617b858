"""Spawn gloo process groups from pytest: ``run_ranks(fn, world_size, *args)`` runs
``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined by a gloo group.

Workers get ``FLUXLITE_TIMEOUT_S`` small enough that a protocol bug fails the test, not the suite.

The processes come from a fork server that has imported torch and fluxlite once (nothing else: no
process group, no workspace, no thread), so each rank is still a fresh process with fluxlite's state
untouched, without paying for those imports again (about 1-2 s of CPU per rank on CI's 2 cores).
A rank gets the environment of the test that starts it, as a spawned process would, not the fork
server's.

``run_script(script, nproc, *args)`` runs a script as torchrun would (``nproc`` ranks with torchrun's
environment variables, each running the script as ``__main__`` and leaving the interpreter the normal
way), its ranks forked by a launcher that imported torch and fluxlite once.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# What run_script's launcher imports by default: what a fluxlite script under torchrun imports
# (torch._dynamo: the custom ops' dispatch imports it at their first call), and Megatron.
SCRIPT_PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "numpy", "triton", "fluxlite", "fluxlite.parallel",
                  "megatron.core"]
# What the fork server of run_ranks imports before it forks the first rank: the same, with pytest, the
# tests' helpers and the compiler. A module that is not installed is skipped. None of them starts a
# thread or reads, at import, an environment variable that a test sets for its ranks; TRITON_INTERPRET,
# which the kernel modules read at import, is set by tests/conftest.py before the first rank starts.
# The compiler and Megatron take seconds to import. A test that checks what a fresh rank has imported
# sees these too (none of them is the profiler).
PRELOAD = [*SCRIPT_PRELOAD, "pytest", "tests.dist_utils", "tests.numerics", "torch._inductor.compile_fx"]
_START = "forkserver"


def free_port() -> int:
    """A port for rank 0 to listen on (:func:`fluxlite.group.free_local_port`)."""
    from fluxlite.group import free_local_port

    return free_local_port()


def _entry(rank: int, world_size: int, port: int, fn, args, env) -> None:
    from fluxlite.group import die_with_parent

    die_with_parent()  # a pytest killed by a time limit leaves no rank behind
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(1)  # W ranks share 2 CI cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    done = False
    try:
        fn(rank, world_size, *args)
        done = True
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        import fluxlite

        fluxlite.release_workspaces()
        if done:
            _leave(rank, world_size)
        dist.destroy_process_group()


def _leave(rank: int, world_size: int, timeout_s: float = 60.0) -> None:
    """Rank 0 hosts the group's store: it exits only once every other rank says it is done with the
    store, so that no rank's last store call (a test's final meeting) meets a closed socket."""
    store = dist.distributed_c10d._get_default_store()
    if rank:
        store.set(f"dist_utils/left/{rank}", "1")
        return
    with contextlib.suppress(Exception):  # a rank that died is reported by the spawner, not here
        store.wait([f"dist_utils/left/{r}" for r in range(1, world_size)], timedelta(seconds=timeout_s))


def rank_context():
    """The ``multiprocessing`` context whose processes come from the preloaded fork server (a process
    started from it gets the fork server's environment: pass what it needs as arguments)."""
    ctx = multiprocessing.get_context(_START)
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def run_ranks(fn, world_size: int, *args, timeout_s: float = 20.0, env: dict | None = None) -> None:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` fresh gloo ranks; re-raise failures.

    Each rank's environment is this process's, plus ``FLUXLITE_TIMEOUT_S=timeout_s``, plus ``env``."""
    env = {**os.environ, "FLUXLITE_TIMEOUT_S": str(timeout_s), **(env or {})}
    rank_context()
    mp.start_processes(_entry, args=(world_size, free_port(), fn, args, env), nprocs=world_size, join=True,
                       start_method=_START)


# python -c LAUNCHER PRELOAD_JSON NPROC RUNS OUT_DIR SCRIPT ARGS...: per run, fork NPROC ranks that
# run SCRIPT as __main__ (stdout and stderr into OUT_DIR/run{i}_rank{r}.{out,err}) and then leave the
# interpreter the normal way; print each rank's exit code (negative: killed by that signal) as JSON.
LAUNCHER = """
import gc, json, os, runpy, sys
for name in json.loads(sys.argv[1]):  # once, before any rank forks
    try:
        __import__(name)
    except ImportError:
        pass
gc.freeze()  # what is imported stays out of every rank's collections, the one at exit too: a run takes half the time
nproc, runs, out, script, args = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
from fluxlite.group import die_with_parent, free_local_port
die_with_parent()  # the launcher, and below each rank, ends with the pytest that started it
codes = []
for run in range(runs):
    port = free_local_port()
    pids = []
    for rank in range(nproc):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            die_with_parent()
            for fd, ext in ((1, "out"), (2, "err")):
                path = os.path.join(out, f"run{run}_rank{rank}.{ext}")
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", WORLD_SIZE=str(nproc),
                              LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            sys.argv = [script, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as python SCRIPT does
            runpy.run_path(script, run_name="__main__")
            sys.exit(0)
        pids.append(pid)
    codes.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
print(json.dumps(codes))
"""


class RankRun(NamedTuple):
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str


def run_script(script, nproc: int, *args: str, out_dir, runs: int = 1, preload=SCRIPT_PRELOAD, env: dict | None = None,
               timeout: float = 240) -> list[list[RankRun]]:
    """Run ``script args`` on ``nproc`` ranks as torchrun would, ``runs`` times in a row, from the
    repository root; ``[run][rank]`` results. Each rank gets this process's environment plus
    ``env``, ``PYTHONPATH`` with the repository and torchrun's variables."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {}))
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, json.dumps(list(preload)), str(nproc), str(runs),
                           str(out_dir), str(script), *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"the launcher failed:\n{proc.stdout[-3000:]}{proc.stderr[-6000:]}"
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    out = Path(out_dir)
    return [[RankRun(rc, (out / f"run{i}_rank{r}.out").read_text(), (out / f"run{i}_rank{r}.err").read_text())
             for r, rc in enumerate(ranks)] for i, ranks in enumerate(codes)]


def count_runs(op, impls=("sequential", "fused")) -> dict[str, int]:
    """Count the runs of each implementation of ``op`` (an op object of :mod:`fluxlite.ops`) in this
    rank's process from now on: ``{impl: runs}``, updated as calls run (the op object's methods are
    replaced, in this process only)."""
    runs = {impl: 0 for impl in impls}
    for impl in impls:
        real = getattr(op, impl)

        def counting(*args, impl=impl, real=real):
            runs[impl] += 1
            return real(*args)

        setattr(op, impl, counting)
    return runs
