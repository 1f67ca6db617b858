"""What a process keeps between calls hangs off one object (fluxlite.process.PROCESS): a fused call
fills it, release_workspaces empties what holds buffers, and reset() forgets the rest while the
counters that name store keys go on (so a later workspace never reuses an earlier one's keys)."""

from __future__ import annotations

import torch

from .dist_utils import run_ranks
from .numerics import ag_reference, check, randn


def _fill_release_reset(rank: int, W: int) -> None:
    import fluxlite
    from fluxlite.process import PROCESS

    gen = torch.Generator().manual_seed(4)
    a_full, w = randn(gen, W * 6, 8, dtype=torch.float32), randn(gen, 5, 8, dtype=torch.float32)
    failures: list[str] = []
    fluxlite.set_default_timeout(30.0)
    out = fluxlite.ag_gemm(a_full[rank * 6:(rank + 1) * 6], w, impl="fused")
    check("fused", out, ag_reference(a_full, w, None), torch.float32, failures)
    assert not failures, failures
    assert PROCESS.workspaces and PROCESS.fused_states and PROCESS.groups and PROCESS.timeout_override == 30.0
    assert PROCESS.repeats["ag_gemm"], "a fused call is remembered for its repeats"
    releases = PROCESS.workspace_releases
    fluxlite.release_workspaces()
    assert not PROCESS.workspaces and not PROCESS.fused_states and PROCESS.workspace_releases == releases + 1
    assert not PROCESS.repeats, "the remembered calls hold views of the released buffers"
    PROCESS.reset()
    assert PROCESS.timeout_override is None and not PROCESS.groups and PROCESS.workspace_releases == releases + 2
    # Everything is made again on the next call, under keys no earlier workspace used.
    out = fluxlite.ag_gemm(a_full[rank * 6:(rank + 1) * 6], w, impl="fused", timeout=30.0)
    check("fused after reset", out, ag_reference(a_full, w, None), torch.float32, failures)
    assert not failures, failures
    assert [ws.key.split("/")[0] for ws in PROCESS.workspaces.values()] == [f"rel{releases + 2}"]
    fluxlite.release_workspaces()


def test_a_process_keeps_its_caches_on_one_object_and_forgets_them():
    run_ranks(_fill_release_reset, 2)
