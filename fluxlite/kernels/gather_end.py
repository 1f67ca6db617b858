"""GEMM-AllReduce's second shot's end, in one launch behind the consumer's last GEMM: copy the peers'
reduced chunks, split by split as each lands, from this rank's symmetric ``gathered`` into their
rows of ``out``.

Math
----
With ``W`` ranks, chunks of ``mc`` rows of ``N`` elements and ``out: [M, N]`` contiguous, rank ``p``'s
chunk is the flat run ``[p * mc * N, min((p + 1) * mc, M) * N)``; every rank's symmetric
``gathered: [W, mc, N]`` holds the peers' chunks at the same elements. A chunk's split ``s`` is its
rows ``[bounds[s], bounds[s + 1])``. Each rank's producer pushes its reduced splits into every
peer's ``gathered`` by the copy engine as its consumer finishes them, and behind each copy sets
the peer's ``reduced`` flag of that split (:func:`fluxlite.schedule.reduced_slot`). Every program
of this kernel takes a share of the tiles of every split::

    for s in splits:
        every peer p:  wait reduced[p][s] >= 1     (acquire, system scope; bounded)
        tiles of every peer's  [p * mc * N + bounds[s] * N, min(p * mc + bounds[s + 1], M) * N),
        round robin:  out[i] = gathered[i]

A call on whole output rows (``CROP``: ``N`` off 16 bytes, the call's buffers padded to ``Np``
columns, a whole number of 16-byte units, ``pitch`` of them) keeps every chunk in ``gathered:
[W, mc, Np]``, ours too (the consumer writes it there), and crops each into ``out``'s rows of ``N``
elements; ours needs no wait, so it goes first::

    for s in splits:
        tiles of our rows  [r * mc + bounds[s], min(r * mc + bounds[s + 1], M)), round robin:
            out[i, :N] = gathered[i, :N]
        every peer p:  wait reduced[p][s] >= 1; its rows likewise

Its loads are 16-byte vectors (:func:`fluxlite.kernels.repitch.element_tile`, the same tile as the
crop after a GEMM-RS call), its stores element-wise.

The launch does not wait for this rank's producer, whose last copies may still be on their way
(except where ranks share a GPU: :meth:`fluxlite.fused.Call._enqueue`): the copies of the peers'
earlier splits (within this GPU) run beside the copy engine's push of the last ones (over NVLink),
and only the last split's rows are copied after it has landed. Tiles
hold ``BLOCK`` elements; whole tiles are unmasked (16-byte vectors where a run starts on a
multiple of 8 elements), a run's last tile masked. A program waits for itself
(:func:`~fluxlite.kernels.device_flags.wait_set`: an acquire by one thread, then a CTA barrier) and
loads ``gathered`` with ``.cg`` (at L2, past the SM's L1, which is not coherent with the peers'
writes).

Why SMs for the copy out: launched on the consumer's own stream right behind its last GEMM, a kernel
starts within a microsecond or two of it, and its waits are bounded. A stream wait on the peers'
flags, with a copy-engine copy behind it, has no timeout: a peer that died before its flag would
leave the stream waiting for good. Past ``timeout_ns`` from its first spin a program records
:data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_FINISHED` naming the peer, the slot (so the split)
and the call (first failure wins) and copies nothing more, so the stream drains and the host raises
:class:`fluxlite.FluxliteTimeoutError`. When an earlier wait of the call already failed, the record
is set and every wait here returns at once.

It is launched once when the fused state is made, with nothing to move
(:meth:`fluxlite.fused.state.FusedState._warm_up`), so that its module is loaded before any call.
Its other variants (``CROP``, ``N`` off 16) load at their first call, behind the consumer: nothing
the consumer waits for waits for them (docs/safety.md).
"""

import torch
import triton
import triton.language as tl

from .. import schedule as sch
from . import launch as direct
from .device_flags import TIMEOUT_FINISHED, wait_set
from .repitch import element_tile

BLOCK = 4096
"""Elements of a tile: 32 bytes of bf16 per thread of 8 warps."""
NUM_WARPS = 8
PROGRAMS_PER_SM = 2
"""Programs per SM, compiled to fit an SM together (:func:`fluxlite.kernels.launch.max_registers`):
the programs take tiles round robin, and one that waited outside the SM's register file until the
others left would copy its share of every split last. Two, not the one-shot reduction's four
(:data:`fluxlite.kernels.one_shot.PROGRAMS_PER_SM`): this kernel copies while the copy engines still
move the call's last splits, and on two H200s a call whose transfers outlast its GEMMs
(12001x1000->7880) took 630 us with two resident programs per SM, 662 us with three and 777 us with
four, each copying the peers' earlier splits harder beside the copy engines (BENCHMARKS.md)."""
CROP_TILE = (32, 128)
"""Rows by elements of a tile of the cropping copy (gathered rows wider than ``out``'s)."""
CROP_R, CROP_C = tl.constexpr(CROP_TILE[0]), tl.constexpr(CROP_TILE[1])
PEER_STRIDE = tl.constexpr(sch.MAX_SPLITS)  # schedule.reduced_slot: peer p's flags are p * MAX_SPLITS further


@triton.jit
def copy_run(dst, src, lo, stop, first, step, BLOCK: tl.constexpr):
    """``dst[i] = src[i]`` for ``i`` in ``[lo, stop)``, tiles ``first, first + step, ...``; ``src`` read at L2
    (also AG-GEMM's push of a small call's rows, :mod:`fluxlite.kernels.push_rows`)."""
    lanes = tl.arange(0, BLOCK)
    full = tl.maximum(stop - lo, 0) // BLOCK
    for tile in range(first, full + 1, step):
        start = lo + tile * BLOCK  # int64 (full is): a scalar, the lanes' offsets from it stay 32-bit
        d, s_ = dst + start, src + start
        if tile < full:
            tl.store(d + lanes, tl.load(s_ + lanes, cache_modifier=".cg"))
        else:
            mask = lanes < stop - start
            tl.store(d + lanes, tl.load(s_ + lanes, mask=mask, cache_modifier=".cg"), mask=mask)


@triton.jit
def crop_rows(out, src, lo, hi, N, pitch, first, step):
    """``out[i, :N] = src[i, :N]`` for rows ``i`` in ``[lo, hi)`` (``lo`` 64-bit), ``out``'s rows ``N``
    elements apart and ``src``'s ``pitch`` 16-byte units; tiles of :data:`CROP_TILE` ``first,
    first + step, ...``; ``src`` read at L2."""
    UNIT: tl.constexpr = 128 // src.dtype.element_ty.primitive_bitwidth
    rows = hi - lo
    src, out = src + lo * (pitch * UNIT), out + lo * N
    col_tiles = tl.cdiv(N, CROP_C)
    i = tl.arange(0, CROP_R)[:, None]  # 32-bit offsets within a tile, from its first row's (64-bit) start
    for tile in range(first, tl.cdiv(tl.maximum(rows, 0), CROP_R) * col_tiles, step):
        r0 = ((tile // col_tiles) * CROP_R).to(tl.int64)
        j = ((tile % col_tiles) * CROP_C + tl.arange(0, CROP_C))[None, :]
        element_tile(src + r0 * (pitch * UNIT), out + r0 * N, i, j, rows - r0, N, pitch, rows - r0, N, UNIT, ".cg")


@triton.jit(do_not_specialize=["rank", "world_size", "splits", "total", "pitch", "region", "reduced_at", "timeout_ns"])
def gather_end_kernel(
    out,             # [M, N] contiguous
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here
    flag_bases_ptr,  # int64 [W]: every rank's flag array, as mapped here (ours: rank)
    bounds_ptr,      # int32 [splits + 1]: a chunk's split boundaries in rows, the last mc
    error_ptr,       # int32 error record
    call_ptr,        # int32 the device's call count: this call's number, for the error record
    rank, world_size, splits,
    gathered,        # elements from a data half's start to its gathered [W, mc, N] ([W, mc, Np] where cropped)
    chunk,           # elements of a chunk, mc * N (specialized: a multiple of 16 keeps the copies vectors)
    N,               # elements of a row (specialized likewise)
    total,           # elements of out, M * N
    pitch,           # where CROP: gathered's row pitch in 16-byte units
    region,          # the call's region: its first slot in every flag array
    reduced_at,      # region offset of peer 0's reduced flag of split 0 (schedule.reduced_slot(W, 0, 0))
    timeout_ns,
    BLOCK: tl.constexpr,
    CROP: tl.constexpr,  # gathered's rows wider than out's: every chunk's first N columns, ours too
):
    dtype = out.dtype.element_ty
    first, step = tl.program_id(0), tl.num_programs(0)
    flags = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32)) + region
    src = tl.multiple_of(tl.load(data_bases_ptr + rank).to(tl.pointer_type(dtype)), 16) + gathered
    M = total // N
    mc = chunk // N
    for s in range(0, splits):
        lo_row = tl.load(bounds_ptr + s).to(tl.int64)
        hi_row = tl.load(bounds_ptr + s + 1).to(tl.int64)
        if CROP:  # our own split first, which needs no wait (the consumer wrote it before this launch)
            crop_rows(out, src, rank * mc + lo_row, tl.minimum(rank * mc + hi_row, M), N, pitch, first, step)
        err = tl.full((), 0, tl.int32)
        for p in range(0, world_size):
            if p != rank:
                slot = reduced_at + p * PEER_STRIDE + s
                err = wait_set(flags + slot, call_ptr, error_ptr, timeout_ns, TIMEOUT_FINISHED, slot, p, p)
        if err == 0:
            for p in range(0, world_size):
                if p != rank:
                    if CROP:
                        crop_rows(out, src, p * mc + lo_row, tl.minimum(p * mc + hi_row, M), N, pitch, first, step)
                    else:
                        base = p * chunk.to(tl.int64)  # past total: copies nothing; unclamped: stays 16-aligned
                        copy_run(out, src, base + lo_row * N, tl.minimum(base + hi_row * N, total), first, step, BLOCK)


def launch(*, out: torch.Tensor, data_bases: torch.Tensor, flag_bases: torch.Tensor, bounds: torch.Tensor,
           error: torch.Tensor, call: torch.Tensor, rank: int, world_size: int, gathered: int, chunk_rows: int,
           region: int, reduced_at: int, timeout_s: float, sms: int, cache: dict, pitch: int | None = None) -> None:
    """Launch :func:`gather_end_kernel` on the current stream. ``out: [M, N]`` contiguous; ``bounds``:
    int32 ``[splits + 1]`` on the device, a chunk's split boundaries in rows (``splits`` may be 0:
    nothing moves); ``gathered``: elements from a data half's start to ``gathered``; ``chunk_rows``:
    ``mc``; ``data_bases``, ``flag_bases``: int64 ``[W]``, every rank's data half of the call's parity
    and flag array; ``region``: the call's region's first slot; ``reduced_at``: the region offset of
    peer 0's split-0 flag; ``error``, ``call``: the fused state's error record and call count.
    ``sms``: the SMs to spread over, :data:`PROGRAMS_PER_SM` programs on each. ``pitch``: elements of
    a row of ``gathered``, ``N`` (or ``None``) where its rows are ``out``'s; more (a whole number of
    16-byte units): every chunk's first ``N`` columns cropped into ``out``, ours too."""
    N = out.shape[1]
    units = 0 if pitch is None or pitch == N else pitch * out.element_size() // 16
    direct.launch(gather_end_kernel, cache, PROGRAMS_PER_SM * max(1, sms),
                  (out, data_bases, flag_bases, bounds, error, call, rank, world_size, bounds.numel() - 1, gathered,
                   chunk_rows * N, N, out.numel(), units, region, reduced_at, int(timeout_s * 1e9)),
                  dict(BLOCK=BLOCK, CROP=units > 0), num_warps=NUM_WARPS, num_stages=1, programs_per_sm=PROGRAMS_PER_SM)
