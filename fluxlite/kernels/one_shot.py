"""The one-shot reduction of GEMM-AllReduce and of small GEMM-ReduceScatter calls: every rank reads
the rows it reduces from every rank's partial in its symmetric buffer, for calls small enough
(decode) that one read after the GEMM costs less than an overlapped protocol's steps.

Math
----
With ``W`` ranks, rank ``q`` holding its partial ``P_q = a_q @ weight_q.T: [M, N]`` (in the input
dtype, written by the GEMM before this kernel into its data half of the call's parity), and this
rank reducing the rows ``[row0, row0 + R)`` (all ``M`` for GEMM-AllReduce, its ``M / W`` for
GEMM-ReduceScatter)::

    out[m, n] = epilogue(sum_{q=0}^{W-1} P_q[row0 + m, n]) = scale * (...) + bias[n]   (fp32, q in rank order)

Every rank sums in the same order, so every rank's rows are the same to the bit. The partials and
``out`` are contiguous, so the kernel reads the rows as one run of ``R * N`` elements starting
``first = row0 * N`` elements into each partial, cut into tiles of ``BLOCK`` (the column of an
element is its index mod ``N``, for the bias): the loads are 16-byte vectors at any ``N`` (where
``first`` is a multiple of 16, which Triton specialises on), a decode step's one row keeps every lane
busy, and only the run's last tile is masked. The programs take tiles round robin (no tile waits for
another program's work).

Protocol (rank ``r``, a call of parity ``P``)::

    align:   every peer d: d.signature[P][r] <- ours; d.ready[r] = 1               (fluxlite.kernels.align)
    GEMM:    P_r = a @ weight.T into our data half P                                (before this kernel)
    kernel:  the first program to start: every peer d: d.finished[r] = 1           (release, system scope)
             every program: for every peer p: wait ready[p], check its signature, wait finished[p] (bounded)
                            then its tiles: out = epilogue(sum_q P_q), P_q read through q's data half

``finished[r]`` says that ``P_r`` may be read: the GEMM that wrote it ended before this kernel began
(stream order), and the release at system scope makes its stores visible to a peer that acquires the
flag. One program sets it, the first to start (a claim on a counter the alignment kernel zeroed): so
a program that is not resident yet holds back no peer, and no second, later store of the flag can
land after the peer, done with this call, has cleared its flags for the next one. Each program's
waits are :func:`~fluxlite.kernels.device_flags.wait_peer`'s (an acquire at system scope by one
thread, then a CTA barrier, before any thread loads a peer's partial), and a peer's partial is
loaded ``.cg`` (at L2, past the SM's L1, which is not coherent with the peer's writes). ``P_r`` is
written again two calls later on this parity, once every peer has finished this call (each fused
call waits on a signal that every peer sends only after its previous call), so no barrier ends the
call. A failed wait is recorded (first failure wins) and the program then reads no peer's memory:
its output is garbage and the host raises.
"""

import torch
import triton
import triton.language as tl

from ..epilogue import Epilogue
from .. import schedule as sch
from . import gemm_core as core
from . import launch as direct
from .device_flags import TIMEOUT_RS, sync_args, wait_peer

BLOCK = 4096
"""Elements of a tile: 32 bytes of a bf16 partial per thread of 8 warps per peer."""
NUM_WARPS = 8
PROGRAMS_PER_SM = 4
"""Programs per SM (at most one per tile): more loads from the peers in flight than one program of 8
warps keeps. Reading a peer's partial over NVLink from 8 MiB up, four reached 259-302 GiB/s on two
H200s, one or two programs 0-3% less, and tiles of one row by 4096 columns (one program per SM)
233-295 GiB/s (BENCHMARKS.md, "GEMM-AllReduce's one-shot reduction read as one run"). Compiled to
fit an SM together (:func:`fluxlite.kernels.launch.max_registers`): a program outside the SM's
register file would take its round-robin share of the tiles after the others had finished."""
PEER_LANES = tl.constexpr(8)
"""Peers whose flags a program sets at once (one lane each, so the remote stores go out together
rather than one round trip after another); a larger group takes more rounds."""


@triton.jit
def _reduce_tile(partials_ptr, out, bias_ptr, start, rest, N, rank, world_size, err, scale, BLOCK: tl.constexpr):
    """``out[i] = epilogue(sum_q P_q[i])`` for the flat indices ``i`` in ``[start, start + BLOCK)``, all of
    them (``rest`` None) or those below ``start + rest``, ``q`` in rank order; a peer's partial only
    while no wait failed (``err == 0``). ``start`` is a scalar: the lanes' offsets from it, and their
    columns, stay 32-bit (fewer registers than 64-bit indices per element)."""
    out_dtype = out.dtype.element_ty
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for q in range(0, world_size):  # rank order on every rank
        if (err == 0) | (q == rank):
            # A data half starts 256-byte aligned (fluxlite.workspace.DATA_ALIGN), and `start` is a
            # tile's start plus the kernel's `first`, a multiple of 16 (specialised): the loads are vectors.
            partial = tl.multiple_of(tl.load(partials_ptr + q).to(tl.pointer_type(out_dtype)), 16) + start
            if rest is None:
                acc += tl.load(partial + lanes, cache_modifier=".cg").to(tl.float32)
            else:
                acc += tl.load(partial + lanes, mask=lanes < rest, other=0.0, cache_modifier=".cg").to(tl.float32)
    col = ((start % N).to(tl.int32) + lanes) % N
    y = core.epilogue(acc[None, :], scale, None, tl.arange(0, 1), tl.arange(0, 1) < 1, bias_ptr, col, col < N, 0, 1,
                      BLOCK)
    if rest is None:
        tl.store(out + start + lanes[None, :], y.to(out_dtype))
    else:
        tl.store(out + start + lanes[None, :], y.to(out_dtype), mask=(lanes < rest)[None, :])


@triton.jit(do_not_specialize=["M", "N", "rank", "world_size", "chunk", "sig_base", "finished_at",
                               "signal_at", "claim_slot", "timeout_ns"])
def one_shot_kernel(
    partials_ptr,    # int64 [W]: every rank's data half of the call's parity as mapped here; its partial first
    first,           # elements from a partial's start to the rows reduced here (row0 * N; specialised)
    out,             # [M, N], contiguous: the rows reduced here
    bias_ptr,        # [N] or None
    flag_bases_ptr,  # int64 [W]: every rank's flag array as mapped here
    sync,            # (flags, signature, error record, call count): device_flags.sync_args; the flags are
                     # this rank's region of the call
    counters_ptr,    # int32 counters the alignment kernel zeroed; claim_slot's elects the program that signals
    M, N, rank, world_size,
    chunk,           # the rows' chunk, for a timeout's record (-1: every row)
    sig_base,
    finished_at,     # region offset of peer 0's finished flag (peer p's: + p)
    signal_at,       # slot (of every flag array) of this rank's finished flag in the call's region
    claim_slot, timeout_ns,
    scale,           # fp32 scalar epilogue scale, applied to the reduced sum
    BLOCK: tl.constexpr,
):
    if core.next_claim(counters_ptr, claim_slot) == 0:  # the first program to start announces our partial
        for p0 in range(0, world_size, PEER_LANES):
            q = p0 + tl.arange(0, PEER_LANES)
            peer = (q < world_size) & (q != rank)
            theirs = tl.load(flag_bases_ptr + q, mask=peer, other=0).to(tl.pointer_type(tl.int32)) + signal_at
            tl.atomic_xchg(theirs, tl.full([PEER_LANES], 1, tl.int32), mask=peer, sem="release", scope="sys")
    err = tl.full((), 0, tl.int32)
    for p in range(0, world_size):
        if p != rank:
            err = wait_peer(sync, finished_at + p, sig_base, timeout_ns, TIMEOUT_RS, p, chunk)
    total = M.to(tl.int64) * N
    full = total // BLOCK
    out -= first  # indices from here on are a partial's: the rows reduced here start at `first`
    # Whole tiles without a mask (a mask of unknown alignment would split the vector loads), then the
    # last program takes the rest of the run.
    for tile in range(tl.program_id(0), full, tl.num_programs(0)):
        _reduce_tile(partials_ptr, out, bias_ptr, first + tile * BLOCK, None, N, rank, world_size, err, scale, BLOCK)
    if tl.program_id(0) == tl.num_programs(0) - 1:
        _reduce_tile(partials_ptr, out, bias_ptr, first + full * BLOCK, (total - full * BLOCK).to(tl.int32), N,
                     rank, world_size, err, scale, BLOCK)


def launch(*, partials: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, flag_bases: torch.Tensor,
           flags: torch.Tensor, sig: torch.Tensor, counters: torch.Tensor, error: torch.Tensor, call: torch.Tensor,
           rank: int, world_size: int, sig_base: int, parity: int, timeout_s: float, ep: Epilogue,
           config: core.GemmConfig, cache: dict, row0: int = 0, chunk: int = -1) -> None:
    """Launch :func:`one_shot_kernel` once this rank's partial is in its data half ``parity``.
    ``partials``, ``flag_bases``: the fused state's int64 addresses of every rank's data half
    ``parity`` and flag array; ``out: [M, N]`` contiguous, the sum of the partials' rows ``[row0,
    row0 + M)`` (loaded as 16-byte vectors where ``row0 * N`` is a multiple of 16), ``chunk`` their
    chunk (-1: every row) for a timeout's record; ``flags``, ``sig``, ``error``, ``call``: the
    call's flag region, signature, error record and call count; ``counters``: the tile counters, which
    the alignment kernel zeroed; ``ep``: a scale only. One program per SM (``config``'s count
    under the interpreter) times :data:`PROGRAMS_PER_SM`, one per tile at most; ``cache`` keeps the compiled kernel."""
    M, N = out.shape
    W = world_size
    tiles = -(-(M * N) // BLOCK)  # not triton.cdiv, a JIT function: microseconds of host time per call
    programs = max(1, min(tiles, PROGRAMS_PER_SM * core.persistent_programs(config, out.device)))
    direct.launch(
        one_shot_kernel, cache, programs,
        (partials, row0 * N, out, bias, flag_bases, sync_args(flags, sig, error, call), counters, M, N, rank, W, chunk,
         sig_base,
         sch.finished_slot(W, 0), sch.region_start(W, parity) + sch.finished_slot(W, rank), sch.claim_slot(W),
         int(timeout_s * 1e9), ep.scale),
        dict(BLOCK=BLOCK),
        num_warps=NUM_WARPS, num_stages=1, programs_per_sm=PROGRAMS_PER_SM)
