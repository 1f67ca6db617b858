"""Parity alignment, the call count, the tile counters and the call's arrival: the one-program
kernel that starts every fused call on CUDA.

Math of the protocol
--------------------
Call ``e`` uses flag region and data half ``P = e % 2`` (:mod:`fluxlite.schedule`), and two
consecutive calls must use different parities: the flags and data of parity ``P`` are touched again
no earlier than the next call after the following one, which starts only once every peer has
finished this one. The host picks each call's parity when it enqueues it (eager) or captures it
(graph), alternating. A graph replays with the parities of its capture, so on the device two
consecutive calls can share a parity (a one-call graph replayed twice; an eager call after a replay).

The device keeps ``state = [next parity, null calls, calls]``. Before a call of parity ``P`` with
signature ``sig``::

    state[2] += 1                     # this call's number, which its error record names
    counters[:] = 0                   # the call's tile counters (one graph node fewer than a memset)
    clear region[1 - state[0]]        # the previous call's flags: it has ended, so all are consumed
    if state[0] != P:                 # the previous call used P as well
        null call on 1 - P:           # a barrier through the other region, which is clear
            every peer p: p.region[1-P].ready[r] = 1        (release, system scope)
            every peer p: wait region[1-P].ready[p] >= 1   (bounded)
            clear region[1-P];  state[1] += 1
    every peer p: p.signature[P][r] = sig
    every peer p: p.region[P].ready[r] = 1                  (release, system scope; not for AG with
                                                             return_gathered, whose producer sets it
                                                             once its rows are staged)
    state[0] = 1 - P                                        (release, system scope)

The count is the device's, so a call replayed from a graph (an eager call's own, or a user's) is
named by its place in the sequence the device ran, not by the call it was captured in; with eager
calls only, it is the host's call number.

Why a region may be cleared here, at the start of the next call, rather than at the end of its own:
a peer writes into our region ``P`` again only in its call after the next, which it starts once it
has finished the next one, which needs our arrival at the next one, sent below after the clear. The
null call is a call with no data: once it returns, every peer has finished the previous call (its
null-call ``ready`` is sent after its own clear), so this call may write into the peers'
parity-``P`` buffers. All ranks make the same sequence of calls, so all take the same branch. A peer
that never arrives is recorded as :data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_ALIGN` after
``timeout_ns``; every later wait then returns at once.

The arrival (the signature, then ``ready``) is sent here rather than by the producer: a few stores
in a kernel that runs anyway, instead of a copy and a memop per peer (each a graph node that costs
about a microsecond to launch).
"""

import torch
import triton
import triton.language as tl

from .. import schedule as sch
from . import launch as direct
from .device_flags import SIG_WORDS, TIMEOUT_ALIGN, cta_barrier, wait_set


@triton.jit
def open_call(state_ptr, flag_bases_ptr, counters_ptr, rank, region, num_counters,
              REGION_BLOCK: tl.constexpr, COUNTERS_BLOCK: tl.constexpr):
    """Count the call, zero its tile counters and clear the previous call's region of this rank's
    flags. Returns the parity the device expects next (``state[0]``): the call's own unless the
    previous call used it too, when :func:`null_call` must run first."""
    # Every thread reads before any writes: a program of several warps (the SMs' push) runs this too.
    calls = tl.load(state_ptr + 2, volatile=True)
    cta_barrier()
    tl.store(state_ptr + 2, calls + 1)
    offs_c = tl.arange(0, COUNTERS_BLOCK)
    tl.store(counters_ptr + offs_c, tl.zeros((COUNTERS_BLOCK,), tl.int32), mask=offs_c < num_counters)
    mine = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32))
    offs = tl.arange(0, REGION_BLOCK)
    next_parity = tl.load(state_ptr, volatile=True)
    tl.store(mine + (1 - next_parity) * region + offs, tl.zeros((REGION_BLOCK,), tl.int32), mask=offs < region)
    return next_parity


@triton.jit
def null_call(state_ptr, flag_bases_ptr, error_ptr, parity, rank, world_size, region, timeout_ns,
              REGION_BLOCK: tl.constexpr):
    """A barrier through region ``1 - parity`` (clear): after it every peer has finished the
    previous call, which used ``parity`` too. Counted in ``state[1]``; bounded (a peer that never
    arrives is recorded as ``TIMEOUT_ALIGN``)."""
    other = 1 - parity
    mine = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32))
    for p in range(0, world_size):
        if p != rank:
            theirs = tl.load(flag_bases_ptr + p).to(tl.pointer_type(tl.int32)) + other * region
            tl.atomic_xchg(theirs + rank, 1, sem="release", scope="sys")
    for p in range(0, world_size):
        if p != rank:
            wait_set(mine + other * region + p, state_ptr + 2, error_ptr, timeout_ns, TIMEOUT_ALIGN, p, p, -1)
    offs = tl.arange(0, REGION_BLOCK)
    tl.store(mine + other * region + offs, tl.zeros((REGION_BLOCK,), tl.int32), mask=offs < region)
    nulls = tl.load(state_ptr + 1, volatile=True)
    cta_barrier()
    tl.store(state_ptr + 1, nulls + 1)


@triton.jit
def announce(state_ptr, flag_bases_ptr, sig_ptr, parity, rank, world_size, sig_at, ready_at):
    """Write the call's signature into every peer, then (``ready_at >= 0``) set our ready flag there;
    the device's next call must use the other parity."""
    offs_s = tl.arange(0, SIG_WORDS)
    sig = tl.load(sig_ptr + offs_s)
    for p in range(0, world_size):
        if p != rank:
            theirs = tl.load(flag_bases_ptr + p).to(tl.pointer_type(tl.int32))
            tl.store(theirs + sig_at + offs_s, sig)
            if ready_at >= 0:
                cta_barrier()  # every thread's signature words, before the release
                tl.atomic_xchg(theirs + ready_at, 1, sem="release", scope="sys")
    if ready_at >= 0:  # each peer's ready flag published our signature there
        tl.store(state_ptr, 1 - parity)
    else:  # AG return_gathered's producer sets `ready` after this kernel: the signatures go first
        cta_barrier()
        tl.atomic_xchg(state_ptr, 1 - parity, sem="release", scope="sys")


@triton.jit(do_not_specialize=["parity", "rank", "world_size", "region", "num_counters", "sig_at", "ready_at",
                               "timeout_ns"])
def align_kernel(
    state_ptr,       # int32 [3]: the parity the next call must use, null calls so far, calls so far
    flag_bases_ptr,  # int64 [W]: each rank's flag array, as mapped here
    error_ptr,       # int32 error record
    counters_ptr,    # int32 [num_counters] the call's tile counters
    sig_ptr,         # int32 [SIG_WORDS] this call's signature
    parity, rank, world_size, region, num_counters,
    sig_at,          # slot (of every flag array) where this rank's signature of parity `parity` goes
    ready_at,        # slot of this rank's ready flag in region `parity`, or -1: the producer sets it
    timeout_ns,
    REGION_BLOCK: tl.constexpr,  # a power of two >= region (slots of one parity region)
    COUNTERS_BLOCK: tl.constexpr,  # a power of two >= num_counters
):
    expected = open_call(state_ptr, flag_bases_ptr, counters_ptr, rank, region, num_counters, REGION_BLOCK,
                         COUNTERS_BLOCK)
    if expected != parity:
        null_call(state_ptr, flag_bases_ptr, error_ptr, parity, rank, world_size, region, timeout_ns, REGION_BLOCK)
    announce(state_ptr, flag_bases_ptr, sig_ptr, parity, rank, world_size, sig_at, ready_at)


def arguments(*, state: torch.Tensor, flag_bases: torch.Tensor, error: torch.Tensor, counters: torch.Tensor,
              signature: torch.Tensor, parity: int, rank: int, world_size: int, ready: bool, timeout_s: float) -> dict:
    """A call's alignment as :func:`launch` takes it (but ``cache``), and a kernel that starts the
    call itself (:mod:`fluxlite.kernels.push_rows`): the flag slots from the schedule; ``ready``:
    whether this kernel sets our ready flag on the peers."""
    W = world_size
    return dict(state=state, flag_bases=flag_bases, error=error, counters=counters, signature=signature,
                parity=parity, rank=rank, world_size=W, region=sch.region_slots(W),
                sig_at=sch.signature_slot(W, parity, rank),
                ready_at=sch.region_start(W, parity) + sch.ready_slot(rank) if ready else -1, timeout_s=timeout_s)


def launch(*, state: torch.Tensor, flag_bases: torch.Tensor, error: torch.Tensor, counters: torch.Tensor,
           signature: torch.Tensor, parity: int, rank: int, world_size: int, region: int, sig_at: int, ready_at: int,
           timeout_s: float, cache: dict) -> None:
    """Launch :func:`align_kernel` (one program) on the current stream. ``state: int32 [3]``,
    ``flag_bases: int64 [W]`` (addresses), ``error``: the fused state's error record, ``counters``:
    its int32 tile counters, ``signature: int32 [SIG_WORDS]`` the call's; ``sig_at``, ``ready_at``:
    slots of every flag array (``ready_at`` -1: not set here)."""
    n = counters.numel()
    direct.launch(align_kernel, cache, 1,
                  (state, flag_bases, error, counters, signature, parity, rank, world_size, region, n, sig_at,
                   ready_at, int(timeout_s * 1e9)),
                  dict(REGION_BLOCK=triton.next_power_of_2(region), COUNTERS_BLOCK=triton.next_power_of_2(n)),
                  num_warps=1, num_stages=1)
