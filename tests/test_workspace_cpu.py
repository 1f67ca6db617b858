"""The CPU workspace's /dev/shm files: unlinked as soon as every rank mapped them, so none outlives
the job, after a normal run, after growth, or when a rank is killed.

Most kill tests start their ranks with plain ``multiprocessing`` (from the tests' preloaded fork
server) and a short gloo timeout, so the survivors live on to show what they leave behind. The last
one uses ``run_ranks``, which (like torchrun) SIGTERMs every survivor as soon as one rank dies.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import time
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fluxlite

from .dist_utils import free_port, rank_context, run_ranks


def _leftovers(prefix: str) -> list[str]:
    return sorted(glob.glob(prefix + "*"))


def _peer_views_work(ws, rank: int, W: int, stamp: float) -> None:
    """Each rank writes into its own data half; after a barrier every rank reads it through its mapping."""
    ws.data(rank, 0, (4,), torch.float32).fill_(stamp + rank)
    dist.barrier()
    for p in range(W):
        got = ws.data(p, 0, (4,), torch.float32)
        assert bool((got == stamp + p).all()), f"rank {rank} reads {got.tolist()} from rank {p}, expected {stamp + p}"
    dist.barrier()


def _create_grow_check(rank: int, W: int, out_dir: str) -> "fluxlite.SymmetricWorkspace":
    """Create the workspace, grow it twice; after each step: no names left, every mapping works."""
    ws = fluxlite.get_workspace()
    prefix = ws._backend.prefix
    assert os.path.dirname(prefix) == "/dev/shm" or not os.path.isdir("/dev/shm")
    if rank == 0:
        with open(os.path.join(out_dir, "prefix"), "w") as f:
            f.write(prefix)
    for step, size in enumerate((None, 3 * ws.capacity, 5 * ws.capacity)):
        if size is not None:
            before = ws.capacity
            ws.reserve(size)  # collective
            assert ws.capacity >= size > before
        dist.barrier()
        assert not _leftovers(prefix), f"step {step}: {_leftovers(prefix)} still in /dev/shm after every rank mapped"
        _peer_views_work(ws, rank, W, stamp=10.0 * (step + 1))
    # The protocol runs on the grown, unlinked mapping.
    a, w = torch.randn(70, 12), torch.randn(5, 12)
    out, gathered = fluxlite.ag_gemm(a, w, impl="fused", return_gathered=True)
    torch.testing.assert_close(gathered[rank * 70 : (rank + 1) * 70], a)
    torch.testing.assert_close(out, gathered @ w.t())
    return ws


# ---- rank processes started by hand -------------------------------------------------------------


def _entry(rank: int, W: int, port: int, out_dir: str, scenario: str) -> None:
    os.environ["FLUXLITE_TIMEOUT_S"] = "30"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W,
                            timeout=timedelta(seconds=15))
    try:
        globals()[scenario](rank, W, out_dir)
    except BaseException:
        with open(os.path.join(out_dir, f"error-{rank}"), "w") as f:
            f.write(traceback.format_exc())
        raise
    # No destroy_process_group: with a dead peer it may block; the process exits instead.


def _run(scenario: str, W: int, tmp_path, deadline_s: float = 60.0) -> list[int]:
    """Start W ranks of ``scenario``; return their exit codes (never hangs past ``deadline_s``)."""
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, W, port, str(tmp_path), scenario)) for r in range(W)]
    for p in procs:
        p.start()
    end = time.monotonic() + deadline_s
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"ranks {hung} still running after {deadline_s} s"
    errors = {r: (tmp_path / f"error-{r}").read_text() for r in range(W) if (tmp_path / f"error-{r}").exists()}
    assert not errors, "\n".join(f"rank {r}:\n{e}" for r, e in errors.items())
    return [p.exitcode for p in procs]


def _prefix(tmp_path) -> str:
    prefix = (tmp_path / "prefix").read_text()
    assert os.path.basename(prefix).startswith("fluxlite-")
    return prefix


# ---- scenarios (run inside the ranks) -----------------------------------------------------------


def normal_run(rank: int, W: int, out_dir: str) -> None:
    _create_grow_check(rank, W, out_dir)
    fluxlite.release_workspaces()
    dist.barrier()
    dist.destroy_process_group()


def killed_after_creation(rank: int, W: int, out_dir: str) -> None:
    """The last rank is SIGKILLed once the (grown) workspace exists; a survivor's wait on it times out,
    and the survivor's mappings of the dead rank's memory stay valid."""
    ws = _create_grow_check(rank, W, out_dir)
    if rank == W - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    a, w = torch.randn(70, 12), torch.randn(5, 12)
    try:
        # return_gathered: the pull path, which writes no peer's data half (the push path would
        # overwrite the stamp read below)
        fluxlite.ag_gemm(a, w, impl="fused", timeout=1.0, return_gathered=True)
    except fluxlite.FluxliteTimeoutError as e:
        assert e.peer == W - 1, e
    else:
        raise AssertionError("a fused call with a dead peer returned")
    dead = ws.data(W - 1, 0, (4,), torch.float32)  # the dead rank's memory, through our mapping
    assert bool((dead == 30.0 + W - 1).all()), dead.tolist()


def killed_while_allocating(rank: int, W: int, out_dir: str) -> None:
    """The last rank dies inside a growth, right after creating its new file (the one window in which
    names exist). The survivors' failed growth must take every name of that generation down."""
    ws = fluxlite.get_workspace()
    prefix = ws._backend.prefix
    if rank == 0:
        with open(os.path.join(out_dir, "prefix"), "w") as f:
            f.write(prefix)
    dist.barrier()
    if rank == W - 1:
        from fluxlite import rendezvous

        real_barrier = rendezvous.barrier

        def die_at_barrier(*args, **kwargs):
            with open(os.path.join(out_dir, "present-at-kill"), "w") as f:
                json.dump(_leftovers(prefix), f)
            os.kill(os.getpid(), signal.SIGKILL)
            return real_barrier(*args, **kwargs)

        rendezvous.barrier = die_at_barrier  # the first barrier inside _SharedFiles.allocate
    try:
        ws.reserve(4 * ws.capacity, timeout_s=3.0)
    except fluxlite.FluxliteTimeoutError as e:  # the dead peer never arrives at the barrier
        assert e.peer == W - 1 and e.step != "flag", e
    else:
        raise AssertionError("growth succeeded with a dead peer")


# ---- tests --------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_no_shm_files_after_creation_growth_and_a_normal_run(tmp_path):
    assert _run("normal_run", 2, tmp_path) == [0, 0]
    assert not _leftovers(_prefix(tmp_path))


@pytest.mark.timeout(90)
def test_no_shm_files_after_a_rank_is_killed(tmp_path):
    codes = _run("killed_after_creation", 2, tmp_path)
    assert codes == [0, -signal.SIGKILL], codes
    assert not _leftovers(_prefix(tmp_path))


@pytest.mark.timeout(90)
def test_no_shm_files_after_a_rank_is_killed_while_the_workspace_grows(tmp_path):
    codes = _run("killed_while_allocating", 2, tmp_path)
    assert codes == [0, -signal.SIGKILL], codes
    present = json.loads((tmp_path / "present-at-kill").read_text())
    assert present, "the killed rank's new file did not exist when it died: the test missed the window"
    assert not _leftovers(_prefix(tmp_path)), f"left behind (present at kill: {present})"


@pytest.mark.timeout(90)
def test_no_shm_files_when_the_launcher_sigterms_the_survivors(tmp_path):
    """A rank SIGTERMed while the workspace grows removes that generation's names before it exits
    (the SIGTERM handler in _SharedFiles.allocate)."""
    with pytest.raises(torch.multiprocessing.ProcessExitedException):
        run_ranks(killed_while_allocating, 2, str(tmp_path))
    present = json.loads((tmp_path / "present-at-kill").read_text())
    assert present, "the killed rank's new file did not exist when it died: the test missed the window"
    assert not _leftovers(_prefix(tmp_path)), f"left behind (present at kill: {present})"
