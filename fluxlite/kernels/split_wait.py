"""The matmul consumers' bounded wait for one split of the peers' data: a one-program kernel between
two cuBLAS GEMMs on the caller's stream.

Math of the protocol
--------------------
GEMM-RS's matmul consumer (:mod:`fluxlite.ops.gemm_rs`) computes this rank's own chunk split by
split as ``out[split] = scale * A[split] @ W.T + sum_p recv[p][split]``, one ``addmm`` per split whose
``C`` input is a peer's partial; AG-GEMM's (:mod:`fluxlite.ops.ag_gemm`) computes a peer's rows split
by split once they are in the gathered buffer. Before the GEMM of split ``s`` may read the data of
the peers ``p`` in ``[peer_lo, peer_hi)`` (every peer for GEMM-RS, the chunk's owner for AG)::

    for every such p != r:  wait ready[p]; check p's call signature; wait data[p][s] >= 1
                            (acquire, system scope; bounded: device_flags.wait_peer)

A stream wait (``cuStreamWaitValue32``) would do this for free, but it has no timeout, and the flag
is set by the peer's producer: a peer that died would leave the stream waiting for good. This
kernel waits with :func:`~fluxlite.kernels.device_flags.wait_peer` instead: past ``timeout_ns`` it
records ``code`` (:data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_RS` or ``ERR_TIMEOUT_AG``, what
the data is) naming the peer, the chunk and the slot (or a call mismatch), and returns, so the
stream drains and the host raises. After a recorded failure every later wait returns at once; the
GEMMs after it compute on whatever the buffers hold, and the call fails.

No GEMM kernel of ours spins while it waits (cuBLAS's kernels end), so it needs one SM for a moment,
and it is launched once when the fused state is made (:meth:`fluxlite.fused.state.FusedState._warm_up`),
as the other small kernels are, so that its module is loaded before any call.
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .device_flags import ERR_TIMEOUT_AG, ERR_TIMEOUT_RS, sync_args, wait_peer


@triton.jit(do_not_specialize=["first", "peer_stride", "peer_lo", "peer_hi", "rank", "chunk", "sig_base",
                               "timeout_ns", "code"])
def split_wait_kernel(
    sync,        # (flags, signature, error record, call count): device_flags.sync_args
    first,       # region offset of peer 0's data flag of the split (schedule.data_slot(W, 0, s))
    peer_stride,  # distance between consecutive peers' data flags (schedule.peer_slots())
    peer_lo, peer_hi,  # the peers waited for: [peer_lo, peer_hi), this rank skipped
    rank,
    chunk,       # the chunk the data belongs to (for the error record); -1: each peer's own
    sig_base,    # region offset of peer 0's signature of the call's parity
    timeout_ns,
    code,        # the error code of a timeout (device_flags.ERR_TIMEOUT_*)
):
    for p in range(peer_lo, peer_hi):
        if p != rank:
            wait_peer(sync, first + p * peer_stride, sig_base, timeout_ns, code, p, tl.where(chunk < 0, p, chunk))


def launch(*, flags: torch.Tensor, sig: torch.Tensor, error: torch.Tensor, call: torch.Tensor, first: int,
           peer_stride: int, rank: int, world_size: int, sig_base: int, timeout_s: float, cache: dict,
           peer: int | None = None, code: int = ERR_TIMEOUT_RS) -> None:
    """Launch :func:`split_wait_kernel` (one program, one warp) on the current stream. ``flags``: this
    rank's flag region of the call; ``sig``: the call's signature; ``error``, ``call``: the fused
    state's error record and call count; ``first``: the region offset of peer 0's data flag of the
    split, ``peer_stride`` the distance to the next peer's. ``peer``: wait for that peer's data only
    (its own chunk: AG-GEMM's rows), or for every peer's (``None``: their partials of this rank's
    chunk for GEMM-RS, each peer's own chunk of rows for AG-GEMM); ``code``: what a timeout records
    (:data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_AG`: gathered rows, each peer's own chunk)."""
    if peer is not None:
        lo, hi, chunk = peer, peer + 1, peer
    else:
        lo, hi, chunk = 0, world_size, -1 if code == ERR_TIMEOUT_AG else rank
    direct.launch(split_wait_kernel, cache, 1,
                  (sync_args(flags, sig, error, call), first, peer_stride, lo, hi, rank, chunk, sig_base,
                   int(timeout_s * 1e9), code),
                  {}, num_warps=1, num_stages=1)
