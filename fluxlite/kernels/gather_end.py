"""GEMM-AllReduce's second shot's end, in one launch behind the consumer's last GEMM: push this
rank's last reduced split to the peers, announce it, and copy the peers' reduced chunks from this
rank's symmetric ``gathered`` into their rows of ``out``, the earlier splits while the last one travels.

Math
----
With ``W`` ranks, chunks of ``mc`` rows and ``out: [M, N]`` contiguous, rank ``p``'s chunk is the flat
run ``[p * mc * N, min((p + 1) * mc, M) * N)``; every rank's symmetric ``gathered: [W, mc, N]``
holds the peers' chunks at the same elements. A chunk's splits but the last (its first ``early``
elements) were pushed by the copy engine while the GEMM ran, and had landed before this launch began
(the caller's stream waited for the producer's). The programs take two roles::

    pushers  (programs [0, pushers)):
        program 0 first:  every peer p:  p.early[r] = 1                     (release, system scope)
        tiles of [start, stop) (our last split), round robin:  every peer p:  p.gathered[i] = out[i]
        once every pusher's stores are out:  every peer p:  p.finished[r] = 1
    pullers  (the rest):
        every peer p:  wait early[p] >= 1     (acquire, system scope; bounded)
        tiles of every peer's  [p * mc * N, p * mc * N + early),  round robin:  out[i] = gathered[i]
        every peer p:  wait finished[p] >= 1  (bounded)
        tiles of every peer's  [p * mc * N + early, min((p + 1) * mc, M) * N):  out[i] = gathered[i]

So the pull of the earlier splits (within this GPU) runs beside the push of the last one (over
NVLink), and only the last split's rows are copied after it. The two overlap only in part: the
SMs' stores to a peer go no faster than the programs that issue them, so fewer pushers push more
slowly (on two H200s the end took about 60 us where the push alone took 31 and the pull 37,
BENCHMARKS.md). Tiles hold ``BLOCK`` elements; whole
tiles are unmasked (16-byte vectors where a run starts on a multiple of 8 elements), a run's last
tile masked. A pusher counts itself once its stores are done (:func:`signal_add`: a CTA barrier,
then a release at system scope); the pusher whose count completes the pushers' has acquired every
other's release and re-publishes all of them with a release store of ``finished`` on every peer.
A puller waits for itself (:func:`~fluxlite.kernels.device_flags.wait_set`: an acquire by one
thread, then a CTA barrier) and loads ``gathered`` with ``.cg`` (at L2, past the SM's L1, which is
not coherent with the peers' writes).

Pushers never wait, and they are the lower program ids, so they run first wherever not every
program is resident at once (and under the interpreter, which runs programs one at a time): every
rank's ``finished`` goes out whatever its pullers wait for.

Why SMs: launched on the consumer's own stream right behind its last GEMM, a kernel starts within a
microsecond or two of it, where a copy-engine copy started 7-13 us after the kernel before it, and a
kernel after that copy 6-9 us after it (2xH200, BENCHMARKS.md). Why a stream wait would not do: it
has no timeout, and a peer that died before its flag would leave the stream waiting for good. Past
``timeout_ns`` from its first spin a puller records
:data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_FINISHED` naming the peer, the slot and the call
(first failure wins) and copies nothing more, so the stream drains and the host raises
:class:`fluxlite.FluxliteTimeoutError`. When an earlier wait of the call already failed, the record
is set and every wait here returns at once.

It is launched once when the fused state is made, with nothing to move
(:meth:`fluxlite.fused.state.FusedState._warm_up`): with lazy module loading its first launch must
not come while a consumer spins (docs/safety.md).
"""

import torch
import triton
import triton.language as tl

from . import launch as direct
from .device_flags import TIMEOUT_FINISHED, signal_add, wait_set

BLOCK = 4096
"""Elements of a tile: 32 bytes of bf16 per thread of 8 warps."""
NUM_WARPS = 8
PEER_LANES = tl.constexpr(8)
"""Peers whose flags a program sets at once (one lane each: the remote stores go out together)."""
PUSHER_SHARE = 4
"""One program in this many pushes while the others pull, where a chunk has earlier splits to pull:
on two H200s a half pushing, or eight programs per SM, or larger tiles, ended the call no sooner
(BENCHMARKS.md)."""


@triton.jit
def _announce(flag_bases_ptr, rank, world_size, slot):
    """``p.flags[slot] = 1`` on every peer ``p`` (release, system scope), a few peers at a time."""
    for p0 in range(0, world_size, PEER_LANES):
        q = p0 + tl.arange(0, PEER_LANES)
        peer = (q < world_size) & (q != rank)
        theirs = tl.load(flag_bases_ptr + q, mask=peer, other=0).to(tl.pointer_type(tl.int32)) + slot
        tl.atomic_xchg(theirs, tl.full([PEER_LANES], 1, tl.int32), mask=peer, sem="release", scope="sys")


@triton.jit
def _copy_run(dst, src, lo, stop, first, step, BLOCK: tl.constexpr):
    """``dst[i] = src[i]`` for ``i`` in ``[lo, stop)``, tiles ``first, first + step, ...``; ``src`` read at L2."""
    lanes = tl.arange(0, BLOCK)
    full = tl.maximum(stop - lo, 0) // BLOCK
    for tile in range(first, full + 1, step):
        at = lo + tile * BLOCK + lanes
        if tile < full:
            tl.store(dst + at, tl.load(src + at, cache_modifier=".cg"))
        else:
            mask = at < stop
            tl.store(dst + at, tl.load(src + at, mask=mask, cache_modifier=".cg"), mask=mask)


@triton.jit(do_not_specialize=["rank", "world_size", "start", "stop", "early", "total", "region", "early_at",
                               "finished_at", "done_slot", "pushers", "timeout_ns"])
def gather_end_kernel(
    out,             # [M, N] contiguous
    data_bases_ptr,  # int64 [W]: every rank's data half of the call's parity, as mapped here
    flag_bases_ptr,  # int64 [W]: every rank's flag array, as mapped here (ours: rank)
    counters_ptr,    # int32 counters the alignment kernel zeroed; done_slot's counts the pushers done
    error_ptr,       # int32 error record
    call_ptr,        # int32 the device's call count: this call's number, for the error record
    rank, world_size,
    start, stop,     # the flat run of out's elements that leaves (the last split's rows of our chunk)
    gathered,        # elements from a data half's start to its gathered [W, mc, N]
    chunk,           # elements of a chunk, mc * N (specialized: a multiple of 16 keeps the copies vectors)
    early,           # elements of a chunk's splits but the last (pulled before finished)
    total,           # elements of out, M * N
    region,          # the call's region: its first slot in every flag array
    early_at,        # region offset of peer 0's early flag (schedule.early_slot(W, 0)); peer p's is + p
    finished_at,     # region offset of peer 0's finished flag (schedule.finished_slot(W, 0)); peer p's is + p
    done_slot, pushers, timeout_ns,
    BLOCK: tl.constexpr,
):
    dtype = out.dtype.element_ty
    pid = tl.program_id(0)
    if pid < pushers:
        if pid == 0:  # our earlier splits landed before this launch (the producer's copies)
            _announce(flag_bases_ptr, rank, world_size, region + early_at + rank)
        lanes = tl.arange(0, BLOCK)
        full = (stop - start) // BLOCK
        for tile in range(pid, full + 1, pushers):
            at = start + tile * BLOCK + lanes
            mask = at < stop
            if tile < full:
                x = tl.load(out + at)
            else:
                x = tl.load(out + at, mask=mask)
            for p in range(0, world_size):
                if p != rank:
                    dst = tl.multiple_of(tl.load(data_bases_ptr + p).to(tl.pointer_type(dtype)), 16) + gathered
                    if tile < full:
                        tl.store(dst + at, x)
                    else:
                        tl.store(dst + at, x, mask=mask)
        if signal_add(counters_ptr + done_slot, 1) == pushers - 1:  # every pusher's stores are out
            _announce(flag_bases_ptr, rank, world_size, region + finished_at + rank)
    else:
        flags = tl.load(flag_bases_ptr + rank).to(tl.pointer_type(tl.int32)) + region
        src = tl.multiple_of(tl.load(data_bases_ptr + rank).to(tl.pointer_type(dtype)), 16) + gathered
        first, step = pid - pushers, tl.num_programs(0) - pushers
        for part in tl.static_range(2):  # the earlier splits once early is set, then the last once finished is
            if part == 0:
                slot = early_at
            else:
                slot = finished_at
            err = tl.full((), 0, tl.int32)
            for p in range(0, world_size):
                if p != rank:
                    err = wait_set(flags + slot + p, call_ptr, error_ptr, timeout_ns, TIMEOUT_FINISHED, slot + p,
                                   p, p)
            if err == 0:
                for p in range(0, world_size):
                    if p != rank:
                        lo = p * chunk.to(tl.int64)
                        end = tl.minimum(lo + chunk, total)
                        cut = tl.minimum(lo + early, end)
                        if part == 0:
                            _copy_run(out, src, lo, cut, first, step, BLOCK)
                        else:
                            _copy_run(out, src, cut, end, first, step, BLOCK)


def pushers_of(programs: int, early: int) -> int:
    """How many of ``programs`` (at least 2) push: :data:`PUSHER_SHARE`'s share where there are earlier
    splits to pull beside the push, half where the pull is the last split's alone."""
    return max(1, programs // (PUSHER_SHARE if early else 2))


def launch(*, out: torch.Tensor, data_bases: torch.Tensor, flag_bases: torch.Tensor, counters: torch.Tensor,
           error: torch.Tensor, call: torch.Tensor, rank: int, world_size: int, start: int, stop: int, gathered: int,
           chunk: int, early: int, region: int, early_at: int, finished_at: int, done_slot: int, timeout_s: float,
           programs: int, cache: dict) -> None:
    """Launch :func:`gather_end_kernel` on the current stream. ``out: [M, N]`` contiguous; ``[start,
    stop)``: our last split's flat elements; ``gathered``, ``chunk`` (``mc * N``), ``early``: elements;
    ``data_bases``, ``flag_bases``: int64 ``[W]``, every rank's data half of the call's parity and flag
    array; ``region``: the call's region's first slot; ``early_at``, ``finished_at``: region offsets
    of peer 0's flags; ``error``, ``call``: the fused state's error record and call count.
    ``programs``: the launch's size (at least 2), about that many tiles' worth of work each."""
    programs = max(2, programs)
    pushers = pushers_of(programs, early)
    direct.launch(gather_end_kernel, cache, programs,
                  (out, data_bases, flag_bases, counters, error, call, rank, world_size, start, stop, gathered, chunk,
                   early, out.numel(), region, early_at, finished_at, done_slot, pushers, int(timeout_s * 1e9)),
                  dict(BLOCK=BLOCK), num_warps=NUM_WARPS, num_stages=1)
