"""The producer's bounded wait for the peers' ``finished`` flags: a one-program kernel on the producer
stream, in place of stream waits that nothing could end.

Math of the protocol
--------------------
A rank's producer sets its ``finished`` flag (:func:`fluxlite.schedule.finished_slot`) on every peer
once its consumer is done and its output rows may be read (GEMM-AllReduce: its reduced chunk, which
the peers then copy). Rank ``r`` must see every peer's flag before it reads that peer's rows::

    for every peer p != r:  wait flags[finished + p] >= 1      (acquire, system scope; bounded)

A stream wait (``cuStreamWaitValue32``) has no timeout. The producer's other stream waits are on
flags or events that one of this rank's bounded kernels produces or releases, but this flag is set
by a peer's producer after the peer's own kernel: a peer that died between its last partial and
this flag would leave the stream waiting for good, and the host could only report a stuck GPU. This
kernel waits by :func:`~fluxlite.kernels.device_flags.wait_set` instead: past ``timeout_ns`` from
its first spin it records :data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_FINISHED` naming the
peer, the slot and the call (first failure wins) and returns, so the stream drains and the host
raises :class:`fluxlite.FluxliteTimeoutError`. When an earlier wait already failed (this call's
consumer, whose partials never came), the record is set and every wait here returns at once.

It runs after the producer's join (the consumer kernel has ended, so SMs are free), and is launched
once when the fused state is made (:meth:`fluxlite.fused.state.FusedState._warm_up`): with lazy
module loading its first launch must not come while a consumer spins (docs/safety.md).
"""

import torch
import triton

from . import launch as direct
from .device_flags import TIMEOUT_FINISHED, wait_set


@triton.jit(do_not_specialize=["first", "rank", "world_size", "timeout_ns"])
def finished_wait_kernel(
    flags_ptr,   # int32: this rank's flag region of the call
    error_ptr,   # int32 error record
    call_ptr,    # int32 the device's call count: this call's number, for the error record
    first,       # region offset of peer 0's finished flag (schedule.finished_slot(W, 0)); peer p's is + p
    rank, world_size,
    timeout_ns,
):
    for p in range(0, world_size):
        if p != rank:
            wait_set(flags_ptr + first + p, call_ptr, error_ptr, timeout_ns, TIMEOUT_FINISHED, first + p, p, p)


def launch(*, flags: torch.Tensor, error: torch.Tensor, call: torch.Tensor, first: int, rank: int, world_size: int,
           timeout_s: float, cache: dict) -> None:
    """Launch :func:`finished_wait_kernel` (one program, one warp) on the current stream. ``flags``:
    this rank's flag region of the call; ``error``, ``call``: the fused state's error record and
    call count; ``first``: the region offset of peer 0's ``finished`` flag."""
    direct.launch(finished_wait_kernel, cache, 1, (flags, error, call, first, rank, world_size, int(timeout_s * 1e9)),
                  {}, num_warps=1, num_stages=1)
