"""Spawn gloo process groups from pytest: ``run_ranks(fn, world_size, *args)`` runs
``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined by a gloo group.

Workers get ``FLUXLITE_TIMEOUT_S`` small enough that a protocol bug fails the test, not the suite.
"""

from __future__ import annotations

import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, fn, args, env) -> None:
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


def run_ranks(fn, world_size: int, *args, timeout_s: float = 20.0, env: dict | None = None) -> None:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned gloo ranks; re-raise failures."""
    env = {"FLUXLITE_TIMEOUT_S": str(timeout_s), **(env or {})}
    mp.spawn(_entry, args=(world_size, free_port(), fn, args, env), nprocs=world_size, join=True)
