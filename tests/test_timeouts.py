"""A peer that never signals: the waiting rank gets FluxliteTimeoutError within the timeout.

The skipping rank stays alive and outside every collective: it waits on the store (not on the
group) until the waiting ranks are done, so a wait that ignored its deadline would hang here, and
pytest-timeout would fail the test. Every scenario checks the exception's fields and message, the
elapsed time, and that the workspace is poisoned afterwards (a later fused call raises at once, even
one that would have to grow the workspace, without entering a collective).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fluxlite
from fluxlite import FluxliteError, FluxliteTimeoutError

from .dist_utils import run_ranks

SLACK_S = 3.0  # scheduling noise allowed past the deadline on a loaded 2-core machine
SHAPE = dict(m=96, K=24, N=16)  # 2 row blocks per rank: small enough to never grow the 1 MiB workspace


def _operands(op: str, W: int, scale: int = 1):
    m, K, N = SHAPE["m"] * scale, SHAPE["K"], SHAPE["N"]
    if op == "ag_gemm":
        return torch.randn(m, K), torch.randn(N, K)
    return torch.randn(W * m, K), torch.randn(N, K)


def _call(op: str, W: int, scale: int = 1, **kw):
    return getattr(fluxlite, op)(*_operands(op, W, scale), impl="fused", **kw)


def _scenario(rank, W, store, tag, op, skipper, expect_peer, expect_chunk, timeout_s, **kw):
    """All ranks make one good fused ``op`` call; then ``skipper`` skips the next one."""
    _call(op, W)  # creates the workspace (collective); its owner clears every flag this call set
    state = fluxlite.fused.state_of(fluxlite.get_workspace())  # the workspace's epochs and poison
    assert state.epoch == 1
    if rank == skipper:
        store.wait([f"{tag}-done-{r}" for r in range(W) if r != skipper], timedelta(seconds=120))
    else:
        t0 = time.monotonic()
        with pytest.raises(FluxliteTimeoutError) as info:
            _call(op, W, **kw)
        elapsed = time.monotonic() - t0
        e = info.value
        assert isinstance(e, TimeoutError) and isinstance(e, FluxliteError)
        assert timeout_s * 0.99 <= elapsed <= timeout_s + SLACK_S, f"{tag}: raised after {elapsed:.2f} s, timeout {timeout_s} s"
        got = dict(rank=e.rank, peer=e.peer, chunk=e.chunk, epoch=e.epoch, seen=e.seen, timeout_s=e.timeout_s)
        want = dict(rank=rank, peer=expect_peer, chunk=expect_chunk, epoch=2, seen=0, timeout_s=timeout_s)
        assert got == want, f"{tag}: {got} != {want}"
        msg = str(e)
        for fragment in (f"rank {rank} ", f"peer rank {expect_peer} ", f"chunk {expect_chunk},",
                         "epoch 2)", "flag holds 0", f"{timeout_s:g} s"):
            assert fragment in msg, f"{tag}: {fragment!r} not in {msg!r}"
        # Poisoned: later fused calls on this workspace raise at once, growing or not, either op.
        for later_op in ("ag_gemm", "gemm_rs"):
            for scale in (1, 64):
                t0 = time.monotonic()
                with pytest.raises(FluxliteError, match="poisoned") as later:
                    _call(later_op, W, scale)
                assert not isinstance(later.value, FluxliteTimeoutError)
                assert time.monotonic() - t0 < 1.0
        assert state.epoch == 2
        store.set(f"{tag}-done-{rank}", "1")
        store.wait([f"{tag}-done-{r}" for r in range(W) if r not in (rank, skipper)], timedelta(seconds=120))
    # The group itself is fine: a sequential call works on every rank, then a fresh workspace does.
    a = torch.randn(8, 4)
    gathered = fluxlite.ag_gemm(a, torch.eye(4), impl="sequential", return_gathered=True)[1]
    torch.testing.assert_close(gathered[rank * 8 : (rank + 1) * 8], a)
    fluxlite.release_workspaces()
    _call(op, W)


def _two_ranks(rank: int, W: int) -> None:
    store = dist.distributed_c10d._get_default_store()
    # 1. The environment variable sets the timeout.
    os.environ["FLUXLITE_TIMEOUT_S"] = "1.0"
    _scenario(rank, W, store, "env", "ag_gemm", skipper=1, expect_peer=1, expect_chunk=1, timeout_s=1.0)
    fluxlite.release_workspaces()
    # 2. The argument wins over the environment. GEMM-RS: rank 0 waits on its own chunk's partials.
    os.environ["FLUXLITE_TIMEOUT_S"] = "600"
    _scenario(rank, W, store, "arg", "gemm_rs", skipper=1, expect_peer=1, expect_chunk=0, timeout_s=0.75,
              timeout=0.75)
    fluxlite.release_workspaces()
    # 3. set_default_timeout wins over the environment; the skipper is now rank 0.
    fluxlite.set_default_timeout(0.75)
    _scenario(rank, W, store, "default", "ag_gemm", skipper=0, expect_peer=0, expect_chunk=0, timeout_s=0.75)
    fluxlite.set_default_timeout(None)


@pytest.mark.timeout(90)
def test_missing_peer_times_out_via_env_argument_and_default():
    run_ranks(_two_ranks, 2, timeout_s=600)


def _three_ranks(rank: int, W: int) -> None:
    """Rank 2 skips: ranks 0 and 1 both name peer 2, even though rank 1 (or 0) did signal."""
    store = dist.distributed_c10d._get_default_store()
    os.environ["FLUXLITE_TIMEOUT_S"] = "1.0"
    # AG: the missing rows are chunk 2.
    _scenario(rank, W, store, "ag3", "ag_gemm", skipper=2, expect_peer=2, expect_chunk=2, timeout_s=1.0)
    fluxlite.release_workspaces()
    # RS: each waiting rank misses rank 2's partial of its own chunk.
    _scenario(rank, W, store, "rs3", "gemm_rs", skipper=2, expect_peer=2, expect_chunk=rank, timeout_s=1.0)


@pytest.mark.timeout(90)
def test_missing_peer_is_named_among_three_ranks():
    run_ranks(_three_ranks, 3, timeout_s=600)
