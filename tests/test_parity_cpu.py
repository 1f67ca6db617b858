"""The parity protocol that makes fused calls replayable from a CUDA graph, run on CPU gloo ranks.

A graph replays its calls with the parities they had at capture, so on the device two consecutive
calls may share a parity. The host emulates that here by skipping a parity on every rank
(``state.epoch += 1``, as after a replay the host never saw). The parity-alignment step must then
insert a null call exactly when two consecutive calls share a parity, every result must match
float64 (AG-GEMM's pushed rows by the producer or, for small chunks, by the pushing rank itself ahead of its
consumer: both, at random), and after every call each rank's flag regions must hold exactly what that call's protocol
sets: the call's own region the flags the schedule names (each peer's ``ready``, and its data flags
per split, or for AG with ``return_gathered`` our producer's pulled flags), the other region
nothing (the owner clears a call's flags when its next call starts: nothing depends on a call's
number any more).
"""

from __future__ import annotations

import importlib
import random

import pytest
import torch
import torch.distributed as dist

import fluxlite
from fluxlite import schedule as sch

from fluxlite.ops import AG, RS
from fluxlite.ops.gemm_rs import MATMUL_SPLITS

from .dist_utils import run_ranks

ag_op = importlib.import_module("fluxlite.ops.ag_gemm")  # the module (fluxlite.ops.ag_gemm is the function)
rs_op = importlib.import_module("fluxlite.ops.gemm_rs")
from .numerics import ag_reference, check, poison_workspace, randn, rs_reference

STEPS = 120
GROUP = 4  # calls per group: the first is checked in isolation, the rest run back to back


def _expected_flags(op: str, r: int, W: int, m: int) -> set[int]:
    """Slots of rank ``r``'s region that one call sets (chunks of ``m`` rows)."""
    if op == "rs_one_shot":  # every peer's arrival and its finished partial
        return {slot for p in range(W) if p != r for slot in (sch.ready_slot(p), sch.finished_slot(W, p))}
    if op == "rs":  # the matmul consumer's splits
        splits = min(MATMUL_SPLITS, -(-m // fluxlite.fused.call.CPU_BLOCK_M))
    else:
        splits = AG.schedule(W, r, m, fluxlite.fused.call.CPU_BLOCK_M).splits
    data = sch.pulled_slot if op == "ag_pull" else sch.data_slot
    return {slot for p in range(W) if p != r
            for slot in (sch.ready_slot(p), *(data(W, p, s) for s in range(splits)))}


def _sequence(rank, W):
    state_rng = random.Random(7)  # the same sequence of calls and skips on every rank
    gen = torch.Generator().manual_seed(11)
    failures: list[str] = []
    fluxlite.ag_gemm(torch.randn(4, 8), torch.randn(8, 8), impl="fused")  # builds the workspace
    ws = fluxlite.get_workspace()
    state = fluxlite.fused.state_of(ws)
    expected_null_calls, device_next = 0, (state.epoch + 1) % 2
    R = sch.region_slots(W)
    pushes, expected_pushes = [], 0  # chunks pushed ahead of the consumer (AllGatherGemm.pushes_by_sm)
    push_by_sm = type(AG)._push_by_sm
    type(AG)._push_by_sm = lambda self, call, a, **kw: (pushes.append(a.shape), push_by_sm(self, call, a, **kw))[1]
    shots, expected_shots = [], 0  # GEMM-RS calls in one shot (GemmReduceScatter.one_shot)
    one_shot = type(RS)._one_shot
    type(RS)._one_shot = lambda self, *args: (shots.append(1), one_shot(self, *args))[1]
    for step in range(STEPS):
        if state_rng.random() < 0.4:
            state.epoch += 1  # a replay moved the device: the host's next parity repeats the last one
        m, K, N = state_rng.choice([(1, 8, 8), (37, 24, 16), (130, 16, 40), (300, 64, 96), (700, 16, 24)])  # 700: 2 splits
        op = state_rng.choice(["ag_push", "ag_pull", "rs"])
        # Either op's small-call path or not; a repeated call keeps its first call's plan, and so its
        # path: each path its own timeout
        ag_op.SM_PUSH_MAX_BYTES = state_rng.choice([0, 1 << 20])  # small chunks by the SMs, or by the producer
        by_sm = op == "ag_push" and ag_op.SM_PUSH_MAX_BYTES > 0
        expected_pushes += by_sm
        rs_op.ONE_SHOT_MAX_BYTES = state_rng.choice([0, 1 << 20])
        in_one_shot = op == "rs" and RS.one_shot(W, W * m, N, 4)
        expected_shots += in_one_shot
        parity = (state.epoch + 1) % 2
        if parity != device_next:
            expected_null_calls += 1
        device_next = 1 - parity
        settle = step % GROUP == 0  # else back to back, as a graph's calls run: the race a null call closes
        if settle:
            dist.barrier()
            poison_workspace(ws)
            dist.barrier()
        if op == "rs":
            a_parts, w_parts = randn(gen, W, W * m, K, dtype=torch.float32), randn(gen, W, N, K, dtype=torch.float32)
            out = fluxlite.gemm_rs(a_parts[rank], w_parts[rank], impl="fused", timeout=30 if in_one_shot else 31)
            ref = rs_reference(a_parts, w_parts, None, rank)
        else:
            a_full, w = randn(gen, W * m, K, dtype=torch.float32), randn(gen, N, K, dtype=torch.float32)
            out = fluxlite.ag_gemm(a_full[rank * m : (rank + 1) * m], w, impl="fused", return_gathered=op == "ag_pull",
                                   timeout=30 if by_sm else 31)
            if op == "ag_pull":
                out, gathered = out
                check(f"step {step} gathered", gathered, a_full.double(), torch.float32, failures)
            ref = ag_reference(a_full, w, None)
        check(f"step {step} {op} m={m}", out, ref, torch.float32, failures)
        if settle:
            dist.barrier()  # every rank is done with this call: every flag it set here is set
            flags = ws.flags(rank)
            left = flags[sch.region_start(W, 1 - parity) : sch.region_start(W, 1 - parity) + R].nonzero()
            if left.numel():
                failures.append(f"step {step}: slots {left.flatten().tolist()} of the other parity's region set")
            mine = flags[sch.region_start(W, parity) : sch.region_start(W, parity) + R]
            got = set(mine.nonzero().flatten().tolist())
            path = "rs_one_shot" if in_one_shot else op
            if got != _expected_flags(path, rank, W, m) or set(mine[sorted(got)].tolist()) - {sch.SET}:
                failures.append(f"step {step} {path}: region holds {sorted(got)}, expected "
                                f"{sorted(_expected_flags(path, rank, W, m))} (all {sch.SET})")
            dist.barrier()  # no rank starts the next call (and sets flags here) before the check
    type(AG)._push_by_sm = push_by_sm
    type(RS)._one_shot = one_shot
    assert len(pushes) == expected_pushes > 5, f"{len(pushes)} calls pushed ahead of the consumer, not {expected_pushes}"
    assert len(shots) == expected_shots > 5, f"{len(shots)} GEMM-RS calls in one shot, expected {expected_shots}"
    assert state.null_calls == expected_null_calls, (state.null_calls, expected_null_calls)
    assert expected_null_calls > 5, "the sequence never made two consecutive calls share a parity"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world_size", [2, 3])
def test_calls_sharing_a_parity_get_a_null_call_and_stay_exact(world_size):
    run_ranks(_sequence, world_size)


def _missing_at_null_call(rank, W):
    fluxlite.ag_gemm(torch.randn(4, 8), torch.randn(8, 8), impl="fused")
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    if rank == 1:  # never makes the next call: rank 0's null call waits for it, bounded
        dist.barrier()
        return
    state.epoch += 1  # the next call repeats the last parity: a null call first
    with pytest.raises(fluxlite.FluxliteTimeoutError) as info:
        fluxlite.ag_gemm(torch.randn(4, 8), torch.randn(8, 8), impl="fused", timeout=0.5)
    assert (info.value.rank, info.value.peer, info.value.epoch) == (0, 1, 3), str(info.value)
    assert "parity-alignment" in str(info.value)
    dist.barrier()


def test_a_peer_missing_at_a_null_call_times_out_naming_it():
    run_ranks(_missing_at_null_call, 2)
