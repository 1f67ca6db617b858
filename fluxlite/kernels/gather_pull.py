"""GEMM-AllReduce's second shot's end: wait for every peer's ``finished`` flag (bounded), then copy
each peer's reduced chunk from this rank's symmetric ``gathered`` into its rows of ``out``.

Math
----
With ``W`` ranks, chunks of ``mc`` rows and ``out: [M, N]`` contiguous, rank ``p``'s chunk is the flat
run ``[p * mc * N, min((p + 1) * mc, M) * N)``; every peer ``p`` pushed it into our ``gathered``
(copy engine and :mod:`fluxlite.kernels.gather_push`), then set ``finished[p]``::

    every program:  for every peer p != r: wait flags[finished + p] >= 1     (acquire, system scope; bounded)
                    then its tiles of every peer's run: out[i] = gathered[i]

Each program waits for itself (:func:`~fluxlite.kernels.device_flags.wait_set`: an acquire by one
thread, then a CTA barrier) before it loads, so no program depends on another, and its loads of
``gathered`` are ``.cg`` (at L2, past the SM's L1, which is not coherent with the peers' writes).
Tiles of ``BLOCK`` elements, round robin; whole tiles unmasked (16-byte vectors where the run starts
on a multiple of 8 elements), the run's last tile masked.

A stream wait (``cuStreamWaitValue32``) has no timeout: a peer that died before its flag would
leave the stream waiting for good, and the host could only report a stuck GPU. Past ``timeout_ns``
from its first spin a program records :data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_FINISHED`
naming the peer, the slot and the call (first failure wins) and copies nothing, so the stream
drains and the host raises :class:`fluxlite.FluxliteTimeoutError`. When an earlier wait of the call
already failed, the record is set and every wait here returns at once.

It is launched once when the fused state is made, with nothing to wait for or copy
(:meth:`fluxlite.fused.state.FusedState._warm_up`): with lazy module loading its first launch must
not come while a consumer spins (docs/safety.md).
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .device_flags import TIMEOUT_FINISHED, wait_set

BLOCK = 4096
"""Elements of a tile: 32 bytes of bf16 per thread of 8 warps."""
NUM_WARPS = 8


@triton.jit(do_not_specialize=["first", "rank", "world_size", "total", "timeout_ns"])
def gather_pull_kernel(
    out,             # [M, N] contiguous
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here (ours: rank)
    flags_ptr,   # int32: this rank's flag region of the call
    error_ptr,   # int32 error record
    call_ptr,    # int32 the device's call count: this call's number, for the error record
    first,       # region offset of peer 0's finished flag (schedule.finished_slot(W, 0)); peer p's is + p
    rank, world_size,
    gathered,        # elements from the data half's start to gathered [W, mc, N]
    chunk,       # elements of a chunk, mc * N (specialized: a multiple of 16 keeps the copies vectors)
    total,       # elements of out, M * N
    timeout_ns,
    BLOCK: tl.constexpr,
):
    err = tl.full((), 0, tl.int32)
    for p in range(0, world_size):
        if p != rank:
            err = wait_set(flags_ptr + first + p, call_ptr, error_ptr, timeout_ns, TIMEOUT_FINISHED, first + p, p, p)
    if err == 0:
        src = tl.multiple_of(tl.load(data_bases_ptr + rank).to(tl.pointer_type(out.dtype.element_ty)), 16) + gathered
        lanes = tl.arange(0, BLOCK)
        for p in range(0, world_size):
            if p != rank:
                lo = p * chunk.to(tl.int64)
                stop = tl.minimum(lo + chunk, total)
                full = tl.maximum(stop - lo, 0) // BLOCK
                for tile in range(tl.program_id(0), full + 1, tl.num_programs(0)):
                    at = lo + tile * BLOCK + lanes
                    if tile < full:
                        tl.store(out + at, tl.load(src + at, cache_modifier=".cg"))
                    else:
                        mask = at < stop
                        tl.store(out + at, tl.load(src + at, mask=mask, cache_modifier=".cg"), mask=mask)


def launch(*, out: torch.Tensor, data_bases: torch.Tensor, flags: torch.Tensor, error: torch.Tensor, call: torch.Tensor,
           first: int, rank: int, world_size: int, gathered: int, chunk: int, timeout_s: float, programs: int,
           cache: dict) -> None:
    """Launch :func:`gather_pull_kernel` on the current stream. ``out: [M, N]`` contiguous;
    ``data_bases``: int64 ``[W]``, every rank's data half of the call's parity; ``flags``: this
    rank's flag region of the call; ``error``, ``call``: the fused state's error record and call
    count; ``first``: the region offset of peer 0's ``finished`` flag; ``gathered``, ``chunk``:
    elements. ``programs``: at most this many, no more than a peer's chunk has tiles."""
    total = out.numel()
    tiles = triton.cdiv(max(min(chunk, total), 1), BLOCK)
    direct.launch(gather_pull_kernel, cache, max(1, min(programs, tiles)),
                  (out, data_bases, flags, error, call, first, rank, world_size, gathered, chunk, total,
                   int(timeout_s * 1e9)),
                  dict(BLOCK=BLOCK), num_warps=NUM_WARPS, num_stages=1)
