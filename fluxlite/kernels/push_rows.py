"""AG-GEMM's gather of a small chunk by the SMs: the call's alignment, this rank's rows stored into
every peer's data half, the peers' data flags set and (with ``wait``) a bounded wait for every peer's
rows, in one launch on the caller's stream ahead of the consumer.

Math
----
With ``W`` ranks, this rank ``r``'s rows are ``nbytes`` contiguous bytes at ``src``, and they go to
the same offset ``dst_offset`` of every peer's data half of the call's parity ``P``
(``data_bases[p]``), and with ``to_self`` of ours too (a consumer that reads every rank's rows from
there). Program 0 starts the call while the others take 16 KiB tiles round robin::

    program 0:  open the call; null call if the device's last call used P too   (kernels.align)
                go = 1                                   (release, GPU scope)
                announce the call: signatures, ready     (kernels.align)
    others:     wait go == 1                             (acquire, bounded)
                every target p, every tile t of this program:  data_bases[p][dst_offset + t] = src[t]
    every program: count += 1    (acq_rel, system scope, after a CTA barrier: publishes its stores)
    the program whose add makes the count whole (old == programs - 1):
        every peer p, split s < splits:  p.flags[P][first_slot + s] = SET   (release, system scope)
        count = go = 0                  (the next launch starts from zero: launches on one stream
                                         never overlap)
        with wait, every peer p, split s:  wait ready, signature, flags[P][data_slot(p, s)]  (bounded)

The acquire of the count by the last program, then its release of each flag, publishes every
program's stores before the flags (cumulativity), as the copy engine's copy and then its flag
copy do on the producer stream.

Why the pushes wait for program 0's ``go``: a push into a peer's half ``P`` is safe once the peer has
finished its last call of parity ``P``. Where the parities alternate that is already known (this
rank waited for the peer's rows of the previous call, sent after that peer had started it), and
``go`` comes as soon as program 0 has cleared the previous call's flags. Where the device's last call
used ``P`` too (a one-call graph replayed), only the null call's barrier says so, and ``go`` follows
it. The other programs spin on ``go`` only while program 0 runs, which the GPU starts no later than
them (it dispatches a grid's programs in order, and a launch here has no more programs than SMs);
the spin is bounded all the same, at twice the call's timeout, so that program 0's own bounded
wait (the null call's) is recorded first where a peer is missing.

Why one launch: the alignment kernel, the push and a one-program wait launched apart cost about
13 us at a decode step's 8 rows on two H200s, where NCCL's all-gather takes about 5; in one launch,
the announcement and the clearing of the flags beside the pushes, 8.4 us (BENCHMARKS.md).
Why SMs, for small chunks: a copy-engine copy into a peer is a node that costs a CUDA graph launch
about 28 us of host time on two H200s, however small (docs/cuda_graphs.md), and each copy and its
flag take some microseconds to start. A call whose rows are gathered by this kernel has no producer
at all: its graph is kernels only (this one, then the consumer's: cuBLAS's GEMM, or the Triton
kernel, which waits itself) on one stream.

It runs on the caller's stream ahead of the consumer rather than beside it: the persistent
consumer may hold every SM while it waits for the peers' rows, and a peer's consumer waits for
ours.
"""

import torch
import triton
import triton.language as tl

from .. import schedule as sch
from . import launch as direct
from .align import announce, null_call, open_call
from .device_flags import TIMEOUT_AG, TIMEOUT_ALIGN, cta_barrier, longer, signal_add, wait_peer, wait_set
from .gather_end import copy_run

BLOCK = 4096
"""int32 words of a tile: 16 KiB, 16 bytes per thread of 8 warps per step."""
NUM_WARPS = 8


@triton.jit(do_not_specialize=["src", "dst_offset16", "words16", "rank", "to_self", "world_size", "parity",
                               "region", "num_counters", "sig_at", "ready_at", "sig_base", "first_slot",
                               "peer_stride", "splits", "wait", "timeout_ns"])
def push_rows_kernel(
    src,             # int64 address of this rank's rows (16-byte aligned)
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here
    flag_bases_ptr,  # int64 [W]: every rank's flag array, as mapped here
    count_ptr,       # int32 [2]: the programs' count and program 0's go (both 0 before the launch and after)
    state_ptr,       # int32 [3]: the device's call sequence (kernels.align)
    error_ptr,       # int32 error record
    counters_ptr,    # int32 [num_counters] the call's tile counters
    sig_ptr,         # int32 [SIG_WORDS] this call's signature
    dst_offset16,    # where our rows go in a data half, in 16-byte units
    words16,         # bytes to push, in 16-byte units
    rank,
    to_self,         # 1: our own data half gets the rows too (no flag: nothing waits on them)
    world_size,
    parity,          # the call's parity: its flag region and data half
    region,          # slots of one parity region (schedule.region_slots)
    num_counters,
    sig_at,          # slot (of every flag array) where this rank's signature of the call's parity goes
    ready_at,        # slot of this rank's ready flag in the call's region
    sig_base,        # region offset of peer 0's signature of the call's parity
    first_slot,      # region offset of our data flag of split 0 (schedule.data_slot(W, rank, 0))
    peer_stride,     # distance between consecutive peers' data flags (schedule.peer_slots())
    splits,          # data flags to set per peer (consecutive slots)
    wait,            # 1: the last program then waits for every peer's every split
    timeout_ns,
    BLOCK: tl.constexpr,
    REGION_BLOCK: tl.constexpr,  # a power of two >= region
    COUNTERS_BLOCK: tl.constexpr,  # a power of two >= num_counters
):
    program, programs = tl.program_id(0), tl.num_programs(0)
    go_ptr = count_ptr + 1
    if program == 0:  # the call's alignment, beside the others' pushes
        expected = open_call(state_ptr, flag_bases_ptr, counters_ptr, rank, region, num_counters, REGION_BLOCK,
                             COUNTERS_BLOCK)
        if expected != parity:
            null_call(state_ptr, flag_bases_ptr, error_ptr, parity, rank, world_size, region, timeout_ns,
                      REGION_BLOCK)
        cta_barrier()  # every thread's clears, before the release
        tl.atomic_xchg(go_ptr, 1, sem="release", scope="gpu")
        announce(state_ptr, flag_bases_ptr, sig_ptr, parity, rank, world_size, sig_at, ready_at)
    else:  # a push: tiles program - 1, program - 1 + (programs - 1), ...
        # Bounded past program 0's own bounded wait (the null call's), at twice the timeout: a
        # program 0 that never ran is recorded as this rank's missing arrival at its alignment.
        wait_set(go_ptr, state_ptr + 2, error_ptr, longer(timeout_ns, 1), TIMEOUT_ALIGN, 0, rank, -1)
        source = tl.multiple_of(src.to(tl.pointer_type(tl.int32)), 16)
        n = words16.to(tl.int64) * 4  # int32 words
        for p in range(0, world_size):
            if (p != rank) | (to_self != 0):
                base = tl.multiple_of(tl.load(data_bases_ptr + p).to(tl.pointer_type(tl.int32)), 16)
                copy_run(base + dst_offset16.to(tl.int64) * 4, source, 0, n, program - 1, programs - 1, BLOCK)
    if signal_add(count_ptr, 1) == programs - 1:
        for p in range(0, world_size):
            if p != rank:
                flags = tl.load(flag_bases_ptr + p).to(tl.pointer_type(tl.int32)) + parity * region + first_slot
                for s in range(0, splits):
                    tl.atomic_xchg(flags + s, 1, sem="release", scope="sys")
        tl.atomic_xchg(go_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(count_ptr, 0, sem="relaxed", scope="gpu")
        if wait != 0:
            mine = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32)) + parity * region
            sync = (mine, sig_ptr, error_ptr, state_ptr + 2)
            for p in range(0, world_size):
                if p != rank:
                    for s in range(0, splits):
                        wait_peer(sync, first_slot + (p - rank) * peer_stride + s, sig_base, timeout_ns, TIMEOUT_AG,
                                  p, p)


def programs_for(nbytes: int, sms: int) -> int:
    """Programs for ``nbytes``: the alignment's, then one per tile, at most one per SM in all."""
    return 1 + max(1, min(sms - 1, -(-nbytes // (4 * BLOCK))))


def launch(*, src: int, nbytes: int, data_bases: torch.Tensor, count: torch.Tensor, dst_offset: int,
           first_slot: int, splits: int, wait: bool, sig_base: int, sms: int, alignment: dict, cache: dict,
           to_self: bool = False) -> None:
    """Launch :func:`push_rows_kernel` on the current stream: the call's alignment by ``alignment``
    (:func:`fluxlite.kernels.align.launch`'s arguments but ``cache``: ``state``, ``flag_bases``,
    ``error``, ``counters``, ``signature``, ``parity``, ``rank``, ``world_size``, ``region``,
    ``sig_at``, ``ready_at``, ``timeout_s``), then ``nbytes`` at address ``src`` into every peer's
    data half (``data_bases``, int64 ``[W]``; ``to_self``: ours too) at ``dst_offset`` bytes, then
    ``splits`` data flags from ``first_slot`` of the call's region of every peer's flag array, then,
    with ``wait``, a bounded wait for every peer's ``splits`` data flags (a timeout is recorded as
    gathered rows, ``ERR_TIMEOUT_AG``; ``sig_base``: the region offset of peer 0's signature of the
    call's parity, :attr:`fluxlite.fused.call.Call.signature_base`). ``src``, ``nbytes`` and
    ``dst_offset`` are multiples of 16; ``count``: int32 ``[2]`` of zeros (the kernel leaves them
    so); ``sms``: the most programs to launch."""
    if src % 16 or nbytes % 16 or dst_offset % 16:
        raise ValueError(f"push_rows: src, nbytes and dst_offset must be multiples of 16, got {src}, {nbytes}, "
                         f"{dst_offset}")
    al = alignment
    W, parity, region, counters = al["world_size"], al["parity"], al["region"], al["counters"]
    direct.launch(push_rows_kernel, cache, programs_for(nbytes, sms),
                  (src, data_bases, al["flag_bases"], count, al["state"], al["error"], counters, al["signature"],
                   dst_offset // 16, nbytes // 16, al["rank"], int(to_self), W, parity, region, counters.numel(),
                   al["sig_at"], al["ready_at"], sig_base, first_slot, sch.peer_slots(), splits, int(wait),
                   int(al["timeout_s"] * 1e9)),
                  dict(BLOCK=BLOCK, REGION_BLOCK=triton.next_power_of_2(region),
                       COUNTERS_BLOCK=triton.next_power_of_2(counters.numel())),
                  num_warps=NUM_WARPS, num_stages=1)
