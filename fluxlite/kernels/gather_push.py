"""GEMM-AllReduce's last reduced split, pushed to the peers by the SMs, then this rank's ``finished``
flag on every peer: the start of the second shot's end, after the consumer's last GEMM.

Math
----
Rank ``r``'s reduced chunk lies in rows ``[r * mc, r * mc + rows_r)`` of ``out: [M, N]`` (contiguous),
and every rank's symmetric ``gathered: [W, mc, N]`` holds the peers' chunks at the same rows. The
earlier splits have left by the copy engine while the GEMM ran; this kernel moves the last one,
the flat run ``[start, stop)`` of ``out``'s elements, and announces the whole chunk::

    for every peer p:   p.gathered[i] = out[i]      for i in [start, stop)       (flat: row * N + column)
    then, once every program's stores are out:  for every peer p:  p.finished[r] = 1

The run is cut into tiles of ``BLOCK`` elements, taken round robin (whole tiles unmasked, so the
loads and stores are 16-byte vectors where ``start`` is a multiple of 8 elements; the last tile
masked). Each program publishes its stores and counts itself (:func:`signal_add`: a CTA barrier,
then a release at system scope); the program whose count completes the launch has acquired every
other program's release and re-publishes all of them (cumulativity) with a release store of the
flag on every peer. The copy engine's copies of the earlier splits completed before this kernel
began (the caller's stream waited for the producer stream), so the flag covers the whole chunk.

Why SMs: launched on the consumer's own stream right behind its last GEMM, a kernel starts within a
microsecond or two of it, where a copy-engine copy started 7-13 us after the kernel before it, and a
kernel after that copy 6-9 us after it (2xH200, BENCHMARKS.md). No program waits here: the peers'
flags are awaited by the next launch (:mod:`fluxlite.kernels.gather_pull`), so this one ends
whatever the peers do, and a program that is not resident yet holds back only the flag.
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .device_flags import signal_add

BLOCK = 4096
"""Elements of a tile: 32 bytes of bf16 per thread of 8 warps per peer."""
NUM_WARPS = 8
PEER_LANES = tl.constexpr(8)
"""Peers whose flags a program sets at once (one lane each: the remote stores go out together)."""


@triton.jit(do_not_specialize=["rank", "world_size", "stop", "signal_at", "done_slot"])
def gather_push_kernel(
    out,             # [M, N] contiguous: our reduced chunk's rows
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here
    flag_bases_ptr,  # int64 [W]: every rank's flag array, as mapped here
    counters_ptr,    # int32 counters the alignment kernel zeroed; done_slot's counts the programs done
    rank, world_size,
    start, stop,     # the flat run of out's elements that leaves (the last split's rows of our chunk)
    gathered,        # elements from a data half's start to its gathered [W, mc, N]
    signal_at,       # slot (of every flag array) of this rank's finished flag in the call's region
    done_slot,
    BLOCK: tl.constexpr,
):
    dtype = out.dtype.element_ty
    lanes = tl.arange(0, BLOCK)
    full = (stop - start) // BLOCK
    for tile in range(tl.program_id(0), full + 1, tl.num_programs(0)):
        at = start + tile * BLOCK + lanes
        mask = at < stop
        if tile < full:
            x = tl.load(out + at)
        else:
            x = tl.load(out + at, mask=mask)
        for p in range(0, world_size):
            if p != rank:
                dst = tl.multiple_of(tl.load(data_bases_ptr + p).to(tl.pointer_type(dtype)), 16) + gathered
                if tile < full:
                    tl.store(dst + at, x)
                else:
                    tl.store(dst + at, x, mask=mask)
    if signal_add(counters_ptr + done_slot, 1) == tl.num_programs(0) - 1:  # every program's stores are out
        for p0 in range(0, world_size, PEER_LANES):
            q = p0 + tl.arange(0, PEER_LANES)
            peer = (q < world_size) & (q != rank)
            theirs = tl.load(flag_bases_ptr + q, mask=peer, other=0).to(tl.pointer_type(tl.int32)) + signal_at
            tl.atomic_xchg(theirs, tl.full([PEER_LANES], 1, tl.int32), mask=peer, sem="release", scope="sys")


def launch(*, out: torch.Tensor, data_bases: torch.Tensor, flag_bases: torch.Tensor, counters: torch.Tensor,
           rank: int, world_size: int, start: int, stop: int, gathered: int, signal_at: int, done_slot: int,
           programs: int, cache: dict) -> None:
    """Launch :func:`gather_push_kernel` on the current stream: ``out[start:stop]`` (flat elements) to
    every peer's data half at ``gathered + start``, then our finished flag (``signal_at``) on every
    peer. ``programs``: at most this many, one per tile at most; ``cache`` keeps
    the compiled kernel."""
    tiles = triton.cdiv(max(stop - start, 1), BLOCK)
    direct.launch(gather_push_kernel, cache, max(1, min(programs, tiles)),
                  (out, data_bases, flag_bases, counters, rank, world_size, start, stop, gathered, signal_at,
                   done_slot),
                  dict(BLOCK=BLOCK), num_warps=NUM_WARPS, num_stages=1)
