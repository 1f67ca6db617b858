"""Spawn gloo process groups from pytest: ``run_ranks(fn, world_size, *args)`` runs
``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined by a gloo group.

Workers get ``FLUXLITE_TIMEOUT_S`` small enough that a protocol bug fails the test, not the suite.

The processes come from a fork server that has imported torch and fluxlite once (nothing else: no
process group, no workspace, no thread), so each rank is still a fresh process with fluxlite's state
untouched, without paying for those imports again (about 1-2 s of CPU per rank on CI's 2 cores).
A rank gets the environment of the test that starts it, as a spawned process would, not the fork
server's.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Imported by the fork server before it forks the first rank (a module that is not installed is
# skipped). None of them starts a thread or reads, at import, an environment variable that a test
# sets for its ranks; TRITON_INTERPRET, which the kernel modules read at import, is set by
# tests/conftest.py before the first rank starts. The compiler and Megatron take seconds to import.
# A test that checks what a fresh rank has imported sees these too (none of them is the profiler).
PRELOAD = ["torch", "torch.distributed", "numpy", "pytest", "triton", "fluxlite", "fluxlite.parallel",
           "tests.dist_utils", "tests.numerics", "torch._dynamo", "torch._inductor.compile_fx", "megatron.core"]
_START = "forkserver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, fn, args, env) -> None:
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(1)  # W ranks share 2 CI cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        import fluxlite

        fluxlite.release_workspaces()
        dist.destroy_process_group()


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
