"""AG-GEMM's push of a small chunk by the SMs: this rank's rows stored into every peer's data half,
then the peers' data flags of the chunk set, in one launch on the caller's stream ahead of the
consumer.

Math
----
With ``W`` ranks, this rank ``r``'s rows are ``nbytes`` contiguous bytes at ``src``, and they go to
the same offset ``dst_offset`` of every peer's data half of the call's parity (``data_bases[p]``),
and with ``to_self`` of ours too (a consumer that reads every rank's rows from there). The
``programs`` programs take 16 KiB tiles round robin::

    every target p, every tile t of this program:  data_bases[p][dst_offset + t] = src[t]
    count += 1                          (acq_rel, system scope, after a CTA barrier: publishes the tiles)
    the program whose add makes the count whole (old == programs - 1):
        every peer p, split s < splits:  p.flags[region + first_slot + s] = SET   (release, system scope)
        count = 0                       (the next launch starts from zero: launches on one stream
                                         never overlap)

The acquire of the count by the last program, then its release of each flag, publishes every
program's stores before the flags (cumulativity), as the copy engine's copy and then its flag
copy do on the producer stream.

Why SMs, for small chunks: a copy-engine copy into a peer is a node that costs a CUDA graph launch
about 28 us of host time on two H200s, however small (docs/cuda_graphs.md), and each copy and its
flag take some microseconds to start. A call whose rows are pushed by this kernel has no producer
at all: its graph is kernels only (alignment, push, then the consumer's: a bounded wait and
cuBLAS's GEMM, or the Triton kernel) on one stream, and a user's graph of one such call replayed in
3.8-6.7 us of host time against 6.4-11.6 with the copy engine (BENCHMARKS.md).
The kernel waits for nothing, so it cannot deadlock behind the consumer, which it precedes.

It runs on the caller's stream ahead of the consumer rather than beside it: the persistent
consumer may hold every SM while it waits for the peers' rows, and a peer's consumer waits for
ours.
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .device_flags import signal_add
from .gather_end import copy_run

BLOCK = 4096
"""int32 words of a tile: 16 KiB, 16 bytes per thread of 8 warps per step."""
NUM_WARPS = 8


@triton.jit(do_not_specialize=["src", "dst_offset16", "words16", "rank", "to_self", "world_size", "region",
                               "first_slot", "splits"])
def push_rows_kernel(
    src,             # int64 address of this rank's rows (16-byte aligned)
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here
    flag_bases_ptr,  # int64 [W]: every rank's flag array, as mapped here
    count_ptr,       # int32: the programs' count (0 before the launch, 0 after)
    dst_offset16,    # where our rows go in a data half, in 16-byte units
    words16,         # bytes to push, in 16-byte units
    rank,
    to_self,         # 1: our own data half gets the rows too (no flag: nothing waits on them)
    world_size,
    region,          # the call's region: its first slot in every flag array
    first_slot,      # region offset of our data flag of split 0 (schedule.data_slot(W, rank, 0))
    splits,          # data flags to set per peer (consecutive slots)
    BLOCK: tl.constexpr,
):
    first, step = tl.program_id(0), tl.num_programs(0)
    source = tl.multiple_of(src.to(tl.pointer_type(tl.int32)), 16)
    n = words16.to(tl.int64) * 4  # int32 words
    for p in range(0, world_size):
        if (p != rank) | (to_self != 0):
            base = tl.multiple_of(tl.load(data_bases_ptr + p).to(tl.pointer_type(tl.int32)), 16)
            copy_run(base + dst_offset16.to(tl.int64) * 4, source, 0, n, first, step, BLOCK)
    if signal_add(count_ptr, 1) == step - 1:
        for p in range(0, world_size):
            if p != rank:
                flags = tl.load(flag_bases_ptr + p).to(tl.pointer_type(tl.int32)) + region + first_slot
                for s in range(0, splits):
                    tl.atomic_xchg(flags + s, 1, sem="release", scope="sys")
        tl.atomic_xchg(count_ptr, 0, sem="relaxed", scope="gpu")


def programs_for(nbytes: int, sms: int) -> int:
    """Programs for ``nbytes``: one per tile, at most one per SM."""
    return max(1, min(sms, -(-nbytes // (4 * BLOCK))))


def launch(*, src: int, nbytes: int, data_bases: torch.Tensor, flag_bases: torch.Tensor, count: torch.Tensor,
           dst_offset: int, rank: int, world_size: int, region: int, first_slot: int, splits: int, sms: int,
           cache: dict, to_self: bool = False) -> None:
    """Launch :func:`push_rows_kernel` on the current stream: ``nbytes`` at address ``src`` into every
    peer's data half (``data_bases``, int64 ``[W]``; ``to_self``: ours too) at ``dst_offset`` bytes,
    then ``splits`` data flags from ``first_slot`` of region ``region`` of every peer's flag array
    (``flag_bases``, int64 ``[W]``). ``src``, ``nbytes`` and ``dst_offset`` are multiples of 16;
    ``count``: an int32 that is 0 (the kernel leaves it 0); ``sms``: the most programs to launch."""
    if src % 16 or nbytes % 16 or dst_offset % 16:
        raise ValueError(f"push_rows: src, nbytes and dst_offset must be multiples of 16, got {src}, {nbytes}, "
                         f"{dst_offset}")
    direct.launch(push_rows_kernel, cache, programs_for(nbytes, sms),
                  (src, data_bases, flag_bases, count, dst_offset // 16, nbytes // 16, rank, int(to_self), world_size,
                   region, first_slot, splits),
                  dict(BLOCK=BLOCK), num_warps=NUM_WARPS, num_stages=1)
