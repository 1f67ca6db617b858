"""Parity alignment, the call count and the tile counters: the one-program kernel that starts every
fused call on CUDA.

Math of the protocol
--------------------
Call ``e`` uses flag region and data half ``P = e % 2`` (:mod:`fluxlite.schedule`), and two
consecutive calls must use different parities: the flags and data of parity ``P`` are touched again
no earlier than the next call after the following one, which starts only once every peer has
finished this one. The host picks each call's parity when it enqueues it (eager) or captures it
(graph), alternating. A graph replays with the parities of its capture, so on the device two
consecutive calls can share a parity (a one-call graph replayed twice; an eager call after a replay).

The device keeps ``state = [next parity, null calls, calls]``. Before a call of parity ``P``::

    state[2] += 1                     # this call's number, which its error record names
    counters[:] = 0                   # the call's tile counters (one graph node fewer than a memset)
    if state[0] != P:                 # the previous call used P as well
        null call on 1 - P:           # a barrier through the other region, which is clear
            every peer p: p.region[1-P].ready[r] = 1        (release, system scope)
            every peer p: wait region[1-P].ready[p] >= 1   (bounded)
            clear region[1-P];  state[1] += 1
    state[0] = 1 - P

The count is the device's, so a call replayed from a graph (an eager call's own, or a user's) is
named by its place in the sequence the device ran, not by the call it was captured in; with eager
calls only, it is the host's call number.

The null call is a call with no data: once it returns, every peer has finished the previous call
(its ``ready`` is sent from its stream after that call and its clear), so this call may write into
the peers' parity-``P`` buffers. All ranks make the same sequence of calls, so all take the same
branch. A peer that never arrives is recorded as :data:`~fluxlite.kernels.flags.ERR_TIMEOUT_ALIGN`
after ``timeout_ns``; every later wait then returns at once.
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .flags import TIMEOUT_ALIGN, wait_set
from .gemm_core import interpreting


@triton.jit(do_not_specialize=["parity", "rank", "world_size", "region", "num_counters", "timeout_ns"])
def align_kernel(
    state_ptr,       # int32 [3]: the parity the next call must use, null calls so far, calls so far
    flag_bases_ptr,  # int64 [W]: each rank's flag array, as mapped here
    error_ptr,       # int32 error record
    counters_ptr,    # int32 [num_counters] the call's tile counters
    parity, rank, world_size, region, num_counters, timeout_ns,
    REGION_BLOCK: tl.constexpr,  # a power of two >= region (slots of one parity region)
    COUNTERS_BLOCK: tl.constexpr,  # a power of two >= num_counters
    INTERPRET: tl.constexpr,
):
    tl.store(state_ptr + 2, tl.load(state_ptr + 2, volatile=True) + 1)
    offs_c = tl.arange(0, COUNTERS_BLOCK)
    tl.store(counters_ptr + offs_c, tl.zeros((COUNTERS_BLOCK,), tl.int32), mask=offs_c < num_counters)
    if tl.load(state_ptr, volatile=True) != parity:
        other = 1 - parity
        mine = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32)) + other * region
        for p in range(0, world_size):
            if p != rank:
                theirs = tl.load(flag_bases_ptr + p).to(tl.pointer_type(tl.int32)) + other * region
                tl.atomic_xchg(theirs + rank, 1, sem="release", scope="sys")
        for p in range(0, world_size):
            if p != rank:
                wait_set(mine + p, state_ptr + 2, error_ptr, timeout_ns, TIMEOUT_ALIGN, p, p, -1, INTERPRET)
        offs = tl.arange(0, REGION_BLOCK)
        tl.store(mine + offs, tl.zeros((REGION_BLOCK,), tl.int32), mask=offs < region)
        tl.store(state_ptr + 1, tl.load(state_ptr + 1, volatile=True) + 1)
    tl.store(state_ptr, 1 - parity)


def launch(*, state: torch.Tensor, flag_bases: torch.Tensor, error: torch.Tensor, counters: torch.Tensor,
           parity: int, rank: int, world_size: int, region: int, timeout_s: float, cache: dict) -> None:
    """Launch :func:`align_kernel` (one program) on the current stream. ``state: int32 [3]``,
    ``flag_bases: int64 [W]`` (addresses), ``error``: the fused state's error record, ``counters``:
    its int32 tile counters."""
    n = counters.numel()
    direct.launch(align_kernel, cache, 1,
                  (state, flag_bases, error, counters, parity, rank, world_size, region, n, int(timeout_s * 1e9)),
                  dict(REGION_BLOCK=triton.next_power_of_2(region), COUNTERS_BLOCK=triton.next_power_of_2(n),
                       INTERPRET=interpreting()),
                  num_warps=1, num_stages=1)
