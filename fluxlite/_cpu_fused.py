"""The tile protocol on CPU ranks: real overlap of communication and compute over /dev/shm.

The producer thread plays the GPU's side stream (copies, then flag stores); the calling thread plays
the persistent GEMM (walk the schedule's row blocks, wait on each block's flag, compute it). Both
read the same :class:`~fluxlite.schedule.TileSchedule` and flag slots as the GPU path.
"""

from __future__ import annotations

import time

import torch

from . import schedule as sch
from .flags import host_set_flag, host_wait_flag
from .workspace import SymmetricWorkspace

CPU_BLOCK_M = 64


def _linear_into(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if bias is not None:
        torch.addmm(bias, x, weight.t(), out=out)
    else:
        torch.matmul(x, weight.t(), out=out)


def _run(ws: SymmetricWorkspace, produce, consume) -> None:
    """Run ``produce`` on the producer thread and ``consume`` here; join; poison on failure."""
    future = ws.submit(produce)
    try:
        consume()
    except BaseException as exc:
        future.exception()  # the producer's waits are bounded by the same deadline
        ws.poison(exc)
        raise
    exc = future.exception()
    if exc is not None:
        ws.poison(exc)
        raise exc


def ag_gemm(ws: SymmetricWorkspace, a, weight, bias, *, timeout_s: float, block_m: int = CPU_BLOCK_M,
            splits: int | None = None):
    """AG-GEMM over the CPU workspace. ``a: [m, K]``, ``weight: [N_local, K]`` -> ``([W*m, N_local], [W*m, K])``."""
    W, r = ws.world_size, ws.rank
    m, K = a.shape
    sched = sch.ag_schedule(W, r, m, block_m, splits)
    ws.reserve(a.numel() * a.element_size())
    epoch = ws.next_epoch()
    parity = epoch % 2
    deadline = time.monotonic() + timeout_s
    gathered = a.new_empty((W * m, K))
    out = a.new_empty((W * m, weight.shape[0]))
    mine = ws.flags(r)
    wait = dict(deadline=deadline, timeout_s=timeout_s, op="ag_gemm", rank=r)

    def produce() -> None:
        ws.data(r, parity, (m, K), a.dtype).copy_(a)
        for p in sched.peers():
            host_set_flag(ws.flags(p), sch.ag_ready_slot(r), epoch)
        for p in sched.peers():
            host_wait_flag(mine, sch.ag_ready_slot(p), epoch, what="staged rows", peer=p, chunk=p, **wait)
            staged = ws.data(p, parity, (m, K), a.dtype)
            for s in range(sched.splits):
                lo, hi = sched.split_rows(s)
                gathered[p * m + lo : p * m + hi].copy_(staged[lo:hi])
                host_set_flag(mine, sch.ag_data_slot(W, p, s), epoch)
        gathered[r * m : (r + 1) * m].copy_(a)  # only the caller reads this: off the critical path

    def consume() -> None:
        for chunk, row0, rows, split in sched.rows():
            if chunk == r:
                src = a[row0 : row0 + rows]
            else:
                host_wait_flag(mine, sch.ag_data_slot(W, chunk, split), epoch, what="gathered rows",
                               peer=chunk, chunk=chunk, split=split, **wait)
                src = gathered[chunk * m + row0 : chunk * m + row0 + rows]
            _linear_into(out[chunk * m + row0 : chunk * m + row0 + rows], src, weight, bias)

    _run(ws, produce, consume)
    return out, gathered


def gemm_rs(ws: SymmetricWorkspace, a, weight, bias, *, timeout_s: float, block_m: int = CPU_BLOCK_M,
            splits: int | None = None):
    """GEMM-RS over the CPU workspace. ``a: [M, K_local]``, ``weight: [N, K_local]`` -> ``[M/W, N]``."""
    W, r = ws.world_size, ws.rank
    M, _ = a.shape
    N = weight.shape[0]
    mc = M // W
    sched = sch.rs_schedule(W, r, mc, block_m, splits)
    ws.reserve(W * mc * N * a.element_size())
    epoch = ws.next_epoch()
    parity = epoch % 2
    deadline = time.monotonic() + timeout_s
    recv = ws.data(r, parity, (W, mc, N), a.dtype)  # slot p: rank p's partial of our rows
    partial = a.new_empty((W, mc, N))  # our partials of the peers' rows, before they leave
    out = a.new_empty((mc, N))
    counters = ws.counters
    counters.zero_()
    mine = ws.flags(r)
    wait = dict(deadline=deadline, timeout_s=timeout_s, op="gemm_rs", rank=r)

    def produce() -> None:
        for d in sched.peers():
            dest = ws.data(d, parity, (W, mc, N), a.dtype)[r]
            for s in range(sched.splits):
                host_wait_flag(counters, sch.rs_counter_slot(d, s), len(sched.split_blocks(s)),
                               what="local partial tiles", peer=r, chunk=d, split=s, **wait)
                lo, hi = sched.split_rows(s)
                dest[lo:hi].copy_(partial[d, lo:hi])
                host_set_flag(ws.flags(d), sch.rs_recv_slot(W, r, s), epoch)

    def consume() -> None:
        done = [0] * counters.numel()
        for chunk, row0, rows, split in sched.rows():
            src = a[chunk * mc + row0 : chunk * mc + row0 + rows]
            if chunk != r:
                torch.matmul(src, weight.t(), out=partial[chunk, row0 : row0 + rows])
                slot = sch.rs_counter_slot(chunk, split)
                done[slot] += 1
                host_set_flag(counters, slot, done[slot])
                continue
            acc = (src @ weight.t()).float()
            for p in sched.peers():
                host_wait_flag(mine, sch.rs_recv_slot(W, p, split), epoch, what="partials",
                               peer=p, chunk=r, split=split, **wait)
                acc += recv[p, row0 : row0 + rows].float()
            if bias is not None:
                acc += bias.float()
            out[row0 : row0 + rows] = acc

    _run(ws, produce, consume)
    return out
