"""The matmul consumer's bounded wait for one split of the peers' partials: a one-program kernel
between two cuBLAS GEMMs on the caller's stream.

Math of the protocol
--------------------
GEMM-RS's matmul consumer (:mod:`fluxlite.ops.gemm_rs`) computes this rank's own chunk split by
split as ``out[split] = scale * A[split] @ W.T + sum_p recv[p][split]``, one ``addmm`` per split whose
``C`` input is a peer's partial. Before the ``addmm`` of split ``s`` may read ``recv[p][s]``::

    for every peer p != r:  wait ready[p]; check p's call signature; wait data[p][s] >= 1
                            (acquire, system scope; bounded: device_flags.wait_peer)

A stream wait (``cuStreamWaitValue32``) would do this for free, but it has no timeout, and the flag
is set by the peer's producer: a peer that died would leave the stream waiting for good. This
kernel waits with :func:`~fluxlite.kernels.device_flags.wait_peer` instead: past ``timeout_ns`` it
records :data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_RS` naming the peer and the slot (or a
call mismatch), and returns, so the stream drains and the host raises. After a recorded failure
every later wait returns at once; the GEMMs after it compute on whatever ``recv`` holds, and the
call fails.

No GEMM kernel of ours spins while it waits (cuBLAS's kernels end), so it needs one SM for a moment,
and it is launched once when the fused state is made (:meth:`fluxlite.fused.state.FusedState._warm_up`),
as the other small kernels are, so that its module is loaded before any call.
"""

import torch
import triton

from . import launch as direct
from .device_flags import TIMEOUT_RS, sync_args, wait_peer


@triton.jit(do_not_specialize=["first", "peer_stride", "rank", "world_size", "sig_base", "timeout_ns"])
def split_wait_kernel(
    sync,        # (flags, signature, error record, call count): device_flags.sync_args
    first,       # region offset of peer 0's data flag of the split (schedule.data_slot(W, 0, s))
    peer_stride,  # distance between consecutive peers' data flags (schedule.peer_slots())
    rank, world_size,
    sig_base,    # region offset of peer 0's signature of the call's parity
    timeout_ns,
):
    for p in range(0, world_size):
        if p != rank:
            wait_peer(sync, first + p * peer_stride, sig_base, timeout_ns, TIMEOUT_RS, p, rank)


def launch(*, flags: torch.Tensor, sig: torch.Tensor, error: torch.Tensor, call: torch.Tensor, first: int,
           peer_stride: int, rank: int, world_size: int, sig_base: int, timeout_s: float, cache: dict) -> None:
    """Launch :func:`split_wait_kernel` (one program, one warp) on the current stream. ``flags``: this
    rank's flag region of the call; ``sig``: the call's signature; ``error``, ``call``: the fused
    state's error record and call count; ``first``: the region offset of peer 0's data flag of the
    split, ``peer_stride`` the distance to the next peer's."""
    direct.launch(split_wait_kernel, cache, 1,
                  (sync_args(flags, sig, error, call), first, peer_stride, rank, world_size, sig_base, int(timeout_s * 1e9)),
                  {}, num_warps=1, num_stages=1)
