"""The Triton kernels under the interpreter (CPU, ``TRITON_INTERPRET=1`` from conftest), on small
shapes: the plain GEMM core, the AG consumer's flag waits and timeout record, the RS producer's
partials and counters, GEMM-AllReduce's one-shot reduction and its two shots' end (the bounded
waits for the peers' reduced flags and the copy of their rows, split by split),
the alignment kernel, and the whole fused protocol with the kernel as the consumer on 2 and 4 gloo
ranks (``FLUXLITE_CPU_CONSUMER=triton``).

bf16 is upcast to fp32 inside the kernel under the interpreter (its bf16 arithmetic is broken), and
its fp32->bf16 store truncates: bf16 tolerances allow two bf16 ulps of the reference's scale.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import triton
import triton.language as tl

from fluxlite import schedule as sch
from fluxlite.epilogue import PLAIN, Epilogue
from fluxlite.host_flags import exception_from_record
from fluxlite.errors import FluxliteCallMismatchError, FluxliteTimeoutError
from fluxlite.kernels import ag_gemm as ag_kern
from fluxlite.kernels import align as align_kern
from fluxlite.kernels import gather_end as gather_end_kern
from fluxlite.kernels import one_shot as ar_kern
from fluxlite.kernels import gemm_core as core
from fluxlite.kernels import gemm_rs as rs_kern
from fluxlite.kernels import push_rows as push_kern
from fluxlite.kernels import split_wait as split_wait_kern
from fluxlite.ops import AG, AR, RS
from fluxlite.kernels.device_flags import (ERR_MISMATCH, ERR_TIMEOUT_AG, ERR_TIMEOUT_ALIGN, ERR_TIMEOUT_FINISHED,
                                           ERR_TIMEOUT_RS, MIRROR_WORD, RECORD_WORDS, longer)

from .dist_utils import run_ranks

CFG = core.INTERPRET_CONFIG
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
pytestmark = pytest.mark.skipif(not core.interpreting(), reason="interpreter tests (CUDA present: see tests/test_gpu_fused.py)")


def _close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert not out.isnan().any(), "an output element was never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < TOL[dtype], f"relative error {err:.2e} >= {TOL[dtype]:.0e} ({dtype})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,K,N", [(70, 48, 50), (33, 70, 41), (96, 64, 96)])  # TMA-aligned or not, ragged
@pytest.mark.parametrize("kmajor", [False, True], ids=["nk", "kn"])
def test_plain_gemm(dtype, M, K, N, kmajor):
    g = torch.Generator().manual_seed(M * K + N)
    a = torch.randn(M, K, generator=g).to(dtype)
    w = torch.randn(N, K, generator=g).to(dtype)
    b = torch.randn(N, generator=g).to(dtype)
    weight = w.t().contiguous().t() if kmajor else w
    out = torch.full((M, N), float("nan"), dtype=dtype)
    ag_kern.gemm(a, weight, b, out=out)
    _close(out, a.double() @ w.double().t() + b.double(), dtype)


def _tables(op, s, N):
    num_n = -(-N // CFG.block_n)
    return dict(blocks=op.kernel_blocks(s, ""), tiles=s.tile_order(num_n, CFG.group_m))


def _slot(W, epoch, slot):
    """The index in the whole flag array of region offset ``slot`` of call ``epoch``'s parity."""
    return sch.region_start(W, epoch % 2) + slot


def _flags_with_signature(W, sig, parity, peers, words=None):
    """A flag array in which every peer in ``peers`` has written ``words`` (default: ``sig``) and set
    its ready flag, in the region of ``parity``; the other region holds every flag set, which the
    kernel must never read."""
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    other = sch.region_start(W, 1 - parity)
    flags[other : other + sch.region_slots(W)] = sch.SET
    for p in peers:
        at = sch.signature_slot(W, parity, p)
        flags[at : at + sch.SIG_WORDS] = torch.tensor(words or sig, dtype=torch.int32)
        flags[sch.region_start(W, parity) + sch.ready_slot(p)] = sch.SET
    return flags


def _ag_launch(a_local, gathered, w, flags, sig, error, epoch, timeout_s, out, rank=0):
    W = gathered.shape[0] // a_local.shape[0]
    s = AG.schedule(W, rank, a_local.shape[0], CFG.block_m, 2)
    ag_kern.launch(a_local=a_local, gathered=gathered, weight=w, out=out, bias=None, ep=PLAIN, scale_local=None,
                   scale_gathered=None, flags=flags[sch.region_start(W, epoch % 2):],
                   sig=torch.tensor(sig, dtype=torch.int32), error=error, call=torch.tensor([epoch], dtype=torch.int32),
                   world_size=W, sig_base=sch.signature_slot(W, epoch % 2, 0) - sch.region_start(W, epoch % 2),
                   timeout_s=timeout_s, config=CFG, cache={}, **_tables(AG, s, w.shape[0]),
                   local_tiles=s.local_tiles(core.column_blocks(w.shape[0], CFG)))
    return s


def test_ag_consumer_reads_local_rows_in_place_and_every_ready_chunk():
    W, m, K, N, epoch = 3, 45, 64, 40, 5
    g = torch.Generator().manual_seed(3)
    A, w = torch.randn(W * m, K, generator=g), torch.randn(N, K, generator=g)
    sig = sch.call_signature(AG.code, m, K, N, torch.float32, 2, (False, False))
    flags = _flags_with_signature(W, sig, epoch % 2, (1, 2))
    for c in (1, 2):
        for sp in range(2):
            flags[_slot(W, epoch, sch.data_slot(W, c, sp))] = sch.SET
    gathered = A.clone()
    gathered[:m] = float("nan")  # rank 0's own rows must come from ``a``, in place
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    out = torch.full((W * m, N), float("nan"))
    _ag_launch(A[:m], gathered, w, flags, sig, error, epoch, 1.0, out)
    assert error.tolist() == [0] * RECORD_WORDS
    _close(out, A.double() @ w.double().t(), torch.float32)


def test_ag_consumer_timeout_records_and_releases_the_producer():
    W, m, K, N, epoch = 2, 40, 32, 32, 9
    A, w = torch.randn(W * m, K), torch.randn(N, K)
    sig = sch.call_signature(AG.code, m, K, N, torch.float32, 2, (True, False))
    flags = _flags_with_signature(W, sig, epoch % 2, ())  # chunk 1 never comes
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    _ag_launch(A[:m], A, w, flags, sig, error, epoch, 0.01, torch.empty(W * m, N))
    code, slot, rec_epoch, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, rec_epoch, seen, peer, chunk) == (ERR_TIMEOUT_AG, sch.ready_slot(1), 9, 0, 1, 1)
    ready = [flags[_slot(W, epoch, sch.ready_slot(p))].item() for p in range(W)]
    assert ready == [sch.SET] * W, "the producer's waits on peers' ready flags were not released"
    exc = exception_from_record(error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and (exc.peer, exc.chunk, exc.split, exc.epoch) == (1, 1, 0, 9)
    assert "arrival" in str(exc)


def _mirrored_record():
    """An empty error record with a mirror (``(record, mirror)``): the program that writes the record
    must copy it to the mirror, which otherwise stays untouched (NaN-like junk here)."""
    mirror = torch.full((RECORD_WORDS,), -7, dtype=torch.int32)
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    address = mirror.data_ptr()
    words = torch.tensor([address & 0xFFFFFFFF, address >> 32], dtype=torch.int64).to(torch.int32)
    error[MIRROR_WORD : MIRROR_WORD + 2] = words
    return error, mirror


def _mirrored(error, mirror) -> bool:
    return mirror.tolist() == error.tolist()


def test_ag_consumer_timeout_on_a_data_flag_names_the_split():
    W, m, K, N, epoch = 2, 40, 32, 32, 3
    A, w = torch.randn(W * m, K), torch.randn(N, K)
    sig = sch.call_signature(AG.code, m, K, N, torch.float32, 2, (False, False))
    flags = _flags_with_signature(W, sig, epoch % 2, (1,))  # arrived, split 0 came, split 1 never
    flags[_slot(W, epoch, sch.data_slot(W, 1, 0))] = sch.SET
    error, mirror = _mirrored_record()
    _ag_launch(A[:m], A, w, flags, sig, error, epoch, 0.01, torch.empty(W * m, N))
    exc = exception_from_record(error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and (exc.peer, exc.chunk, exc.split, exc.seen) == (1, 1, 1, 0)
    assert _mirrored(error, mirror), (mirror.tolist(), error.tolist())


def test_ag_consumer_records_a_peer_in_another_call():
    W, m, K, N, epoch = 2, 40, 32, 32, 4
    A, w = torch.randn(W * m, K), torch.randn(N, K)
    sig = sch.call_signature(AG.code, m, K, N, torch.float32, 2, (False, False))
    theirs = sch.call_signature(AG.code, m + 8, K, N, torch.float32, 2, (False, False))
    flags = _flags_with_signature(W, sig, epoch % 2, (1,), words=theirs)
    for sp in range(2):
        flags[_slot(W, epoch, sch.data_slot(W, 1, sp))] = sch.SET
    error, mirror = _mirrored_record()
    _ag_launch(A[:m], A, w, flags, sig, error, epoch, 1.0, torch.empty(W * m, N))
    rec = error.tolist()
    assert rec[0] == ERR_MISMATCH and rec[4] == 1
    assert _mirrored(error, mirror), "the signatures too, then the code"
    exc = exception_from_record(rec, rank=0, world_size=W, timeout_s=1.0)
    assert isinstance(exc, FluxliteCallMismatchError) and exc.peer == 1
    assert exc.mine == sch.describe_signature(sig) and exc.theirs == sch.describe_signature(theirs)


def _rs_launch(a, w, b, partial, recv, flags, sig, counters, error, epoch, out, r=0, W=2, timeout_s=1.0):
    s = RS.schedule(W, r, a.shape[0], CFG.block_m, 2)
    rs_kern.launch(a=a, weight=w, out=out, bias=b, partial=partial, recv=recv,
                   flags=flags[sch.region_start(W, epoch % 2):], sig=torch.tensor(sig, dtype=torch.int32),
                   counters=counters, error=error, call=torch.tensor([epoch], dtype=torch.int32), rank=r, world_size=W,
                   sig_base=sch.signature_slot(W, epoch % 2, 0) - sch.region_start(W, epoch % 2),
                   timeout_s=timeout_s, ep=PLAIN, config=CFG, cache={}, **_tables(RS, s, w.shape[0]),
                   peer_tiles=(W - 1) * s.local_tiles(core.column_blocks(w.shape[0], CFG)))
    return s


def test_rs_kernel_timeout_records_and_still_counts_every_peer_tile():
    """A peer that never sends its partials: the kernel records the timeout and still counts every
    peer tile (the producer's stream waits on the counters end); it sets no flag of its own."""
    W, K, N, mc, epoch = 2, 32, 32, 40, 6
    a, w = torch.randn(W * mc, K), torch.randn(N, K)
    sig = sch.call_signature(RS.code, W * mc, K, N, torch.float32, 2)
    flags = _flags_with_signature(W, sig, epoch % 2, (1,))  # arrived, but no split ever comes
    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32)
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    before = flags.clone()
    s = _rs_launch(a, w, None, torch.empty(W, mc, N), torch.zeros(W, mc, N), flags, sig, counters, error, epoch,
                   torch.empty(mc, N), timeout_s=0.01)
    assert error[0].item() == ERR_TIMEOUT_RS and error[4].item() == 1, error.tolist()
    n_tiles = -(-N // CFG.block_n)
    assert [counters[sch.counter_slot(1, sp)].item() for sp in range(2)] == [s.split_tiles(sp, n_tiles) for sp in range(2)]
    assert torch.equal(flags, before), "the finished flags are waited on by a bounded kernel: nothing to release"


@pytest.mark.parametrize("mismatch", [False, True], ids=["agree", "mismatch"])
def test_rs_kernel_stores_partials_counts_tiles_and_reduces(mismatch):
    """Peer tiles are stored and counted whatever happens to the local tiles' waits, so the
    producer's stream waits on the counters always end."""
    W, K, N, mc, epoch = 2, 48, 40, 37, 4
    g = torch.Generator().manual_seed(5)
    a, w, b = torch.randn(W * mc, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    sig = sch.call_signature(RS.code, W * mc, K, N, torch.float32, 2)
    theirs = sch.call_signature(AG.code, W * mc, K, N, torch.float32, 2, (False, False)) if mismatch else None
    flags = _flags_with_signature(W, sig, epoch % 2, (1,), words=theirs)
    peer_partial = torch.randn(mc, N, generator=g)
    recv = torch.full((W, mc, N), float("nan"))
    recv[1] = peer_partial
    partial = torch.full((W, mc, N), float("nan"))
    for sp in range(2):
        flags[_slot(W, epoch, sch.data_slot(W, 1, sp))] = sch.SET
    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32)
    error, mirror = _mirrored_record()
    out = torch.full((mc, N), float("nan"))
    s = _rs_launch(a, w, b, partial, recv, flags, sig, counters, error, epoch, out)
    full = a.double() @ w.double().t()
    _close(partial[1], full[mc:], torch.float32)
    n_tiles = -(-N // CFG.block_n)
    assert [counters[sch.counter_slot(1, sp)].item() for sp in range(2)] == [s.split_tiles(sp, n_tiles) for sp in range(2)]
    if mismatch:
        assert error[0].item() == ERR_MISMATCH and _mirrored(error, mirror)
    else:
        assert error[:MIRROR_WORD].tolist() + error[MIRROR_WORD + 2:].tolist() == [0] * (RECORD_WORDS - 2)
        assert mirror.tolist() == [-7] * RECORD_WORDS, "no failure: the mirror is not written"
        _close(out, full[:mc] + peer_partial.double() + b.double(), torch.float32)


def test_the_direct_launch_steps_aside_only_for_a_registered_launch_hook():
    """Triton keeps an empty hook chain where no hook is registered: that must not count as one,
    or every launch pays Triton's per-call argument binding (fluxlite.kernels.launch)."""
    import triton

    from fluxlite.kernels import launch

    assert not launch._hooks_set()
    hook = lambda *args, **kwargs: None  # noqa: E731
    chain = triton.knobs.runtime.launch_enter_hook
    chain.add(hook)
    try:
        assert launch._hooks_set()
    finally:
        chain.remove(hook)
    assert not launch._hooks_set()



def test_the_direct_launch_key_separates_what_triton_compiles_apart():
    """A cached kernel is reused only for calls Triton would compile the same way: an int past 32
    bits is an i64 argument even when not specialised (a timeout of 3 s in ns), a tensor's 16-byte
    alignment and dtype, and for a specialised int, 1 and divisibility by 16. A float's value is
    not, or every new epilogue scale would add a cache entry."""
    from fluxlite.kernels.launch import _spec

    assert _spec(7, False) == _spec(1000, False) != _spec(3_000_000_000, False)
    assert len({_spec(1, True), _spec(16, True), _spec(17, True), _spec(2**40, True)}) == 4
    assert _spec(0.5, False) == _spec(2.0, False)
    t = torch.empty(8, dtype=torch.float32)
    assert _spec(t, True) != _spec(t[1:], True)
    assert _spec(t, True) != _spec(t.double(), True)

def _halves(W, rows, N, gathered_at, seed):
    """Every rank's data half of one parity (fp32 host tensors, ``gathered: [W, mc, N]`` from element
    ``gathered_at``, random) and its address table."""
    g = torch.Generator().manual_seed(seed)
    halves = [torch.randn(gathered_at + W * rows * N, generator=g) for _ in range(W)]
    return halves, torch.tensor([h.data_ptr() for h in halves], dtype=torch.int64)


class _EndCase:
    """Rank ``r`` of ``W`` at the end of a two-shot GEMM-AllReduce of ``M x N`` (chunks of ``mc`` rows
    cut into splits at rows ``cuts``): every rank's data half (random, ``gathered`` from element
    ``at``, its rows ``pitch`` wide: ``N``, or wider for a call on whole rows), flag array and address
    tables, ``out`` with our reduced rows (random) and NaN elsewhere, and an error record with a
    mirror."""

    def __init__(self, W, r, M, N, cuts, epoch, at=64, seed=0, pitch=None):
        self.W, self.r, self.M, self.N, self.epoch, self.at = W, r, M, N, epoch, at
        self.pitch = pitch or N
        self.mc = -(-M // W)
        self.bounds = [0, *cuts, self.mc]
        self.halves, self.bases = _halves(W, self.mc, self.pitch, at, seed)
        self.flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
        self.flag_bases = torch.tensor([f.data_ptr() for f in self.flags], dtype=torch.int64)
        self.out = torch.full((M, N), float("nan"))
        self.ours = slice(r * self.mc, min((r + 1) * self.mc, M))
        self.out[self.ours] = torch.randn(self.out[self.ours].shape, generator=torch.Generator().manual_seed(seed + 1))
        self.error, self.mirror = _mirrored_record()

    @property
    def splits(self):
        return len(self.bounds) - 1

    def rows_of(self, p):
        return max(0, min(self.mc, self.M - p * self.mc))

    def peer_sends(self, p, split):
        """Peer ``p``'s split ``split`` has landed: its ``reduced`` flag set in our array."""
        self.flags[self.r][_slot(self.W, self.epoch, sch.reduced_slot(self.W, p, split))] = sch.SET

    def launch(self, timeout_s=1.0, sms=2):
        gather_end_kern.launch(out=self.out, data_bases=self.bases, flag_bases=self.flag_bases,
                               bounds=torch.tensor(self.bounds, dtype=torch.int32), error=self.error,
                               call=torch.tensor([self.epoch], dtype=torch.int32), rank=self.r, world_size=self.W,
                               gathered=self.at, chunk_rows=self.mc, region=sch.region_start(self.W, self.epoch % 2),
                               reduced_at=sch.reduced_slot(self.W, 0, 0), timeout_s=timeout_s, sms=sms,
                               cache={}, pitch=self.pitch)

    def gathered(self):
        return self.halves[self.r][self.at:].view(self.W, self.mc, self.pitch)[:, :, : self.N]


@pytest.mark.parametrize("M,N,cuts", [(3 * 700, 37, (500,)), (3 * 700 - 5, 37, (350, 650)), (2, 37, ()),
                                      (3 * 40, 64, ()), (3 * 200 - 100, 40, (120,)), (3 * 300, 40, (150, 225, 280))])
def test_gather_end_copies_every_peers_chunk_and_nothing_else(M, N, cuts):
    """Rank 1 of 3; peers 0 and 2 have sent every split. Every peer's chunk comes from our
    ``gathered`` into ``out`` (whole tiles and the ragged last), our own rows stay, no data half and
    no flag changes, and nothing is recorded. Cases: whole chunks, a last chunk cut short, chunks
    past ``M``, one split, a chunk cut short before its last split, tapered splits."""
    W, r, epoch = 3, 1, 5
    case = _EndCase(W, r, M, N, cuts, epoch, seed=M + len(cuts))
    for p in (0, 2):
        for s in range(case.splits):
            case.peer_sends(p, s)
    halves_before = [h.clone() for h in case.halves]
    flags_before = [f.clone() for f in case.flags]
    ours_before = case.out[case.ours].clone()
    case.launch()
    for p in range(W):
        assert torch.equal(case.halves[p], halves_before[p]), p
        assert torch.equal(case.flags[p], flags_before[p]), p
    gathered, mc = case.gathered(), case.mc
    for p in range(W):
        rows = case.rows_of(p)
        if p == r:
            assert torch.equal(case.out[case.ours], ours_before), "our own rows were written"
        else:
            assert torch.equal(case.out[p * mc : p * mc + rows], gathered[p, :rows]), p
    assert case.error.tolist()[:6] == [0] * 6


@pytest.mark.parametrize("M,N,pitch,cuts", [(3 * 70, 37, 40, (30,)), (3 * 70 - 5, 5, 8, (20, 50)), (2, 3, 4, ()),
                                            (3 * 50 - 60, 130, 132, (7,)), (3 * 33, 64, 68, ())])
def test_gather_end_crops_every_chunk_from_wider_rows(M, N, pitch, cuts):
    """A call on whole rows: ``gathered``'s rows are ``pitch`` elements wide (whole 16-byte units),
    ``out``'s ``N``. Rank 2 of 3, every peer's split sent; every chunk's first ``N`` columns, ours
    (in ``gathered`` too) among them, land in ``out`` (poisoned with NaN, ours too), nothing of the
    padding columns does, and no data half changes. Cases: a last chunk cut short, chunks past
    ``M``, tiles across and within rows, ``N`` a multiple of 4 with a wider pitch."""
    W, r, epoch = 3, 2, 4
    case = _EndCase(W, r, M, N, cuts, epoch, seed=M + N, pitch=pitch)
    case.out.fill_(float("nan"))
    for p in (0, 1):
        for s in range(case.splits):
            case.peer_sends(p, s)
    halves_before = [h.clone() for h in case.halves]
    case.launch()
    assert all(torch.equal(h, b) for h, b in zip(case.halves, halves_before))
    gathered, mc = case.gathered(), case.mc
    for p in range(W):
        rows = case.rows_of(p)
        assert torch.equal(case.out[p * mc : p * mc + rows], gathered[p, :rows]), p
    assert not case.out.isnan().any()
    assert case.error.tolist()[:6] == [0] * 6


@pytest.mark.parametrize("missing", [0, 1, 2])
def test_gather_end_records_a_peer_that_never_sends_and_copies_no_more(missing):
    """Rank 0 of 3, three splits: peer 1 sent everything; peer 2 sent its splits before ``missing``
    and died. The wait for its split ``missing`` ends after its timeout with a record naming peer 2,
    that split's flag and the call, mirrored to the host; the peers' splits before it are copied,
    none from it on (NaN)."""
    W, epoch, M, N, cuts = 3, 8, 300, 16, (40, 80)
    case = _EndCase(W, 0, M, N, cuts, epoch, seed=9)
    for s in range(case.splits):
        case.peer_sends(1, s)
    for s in range(missing):
        case.peer_sends(2, s)
    case.launch(timeout_s=0.01)
    slot = sch.reduced_slot(W, 2, missing)
    code, at_slot, call, seen, peer, chunk = case.error.tolist()[:6]
    assert (code, at_slot, call, seen, peer, chunk) == (ERR_TIMEOUT_FINISHED, slot, epoch, 0, 2, 2)
    assert _mirrored(case.error, case.mirror)
    mc, gathered, cut = case.mc, case.gathered(), case.bounds[missing]
    for p in (1, 2):
        rows = case.out[p * mc : p * mc + case.rows_of(p)]
        assert torch.equal(rows[:cut], gathered[p, :cut]), p
        assert rows[cut:].isnan().all(), p
    exc = exception_from_record(case.error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError)
    assert (exc.rank, exc.peer, exc.chunk, exc.split, exc.epoch, exc.step) == (0, 2, 2, missing, epoch, "flag")
    assert "reduced rows" in str(exc) and "peer rank 2" in str(exc)


def test_gather_end_returns_at_once_after_an_earlier_failure():
    """The consumer's wait already failed (its record is set): no peer's flag is waited for and
    nothing of the peers' is copied, so a peer missing from the whole call costs one timeout, the
    consumer's."""
    W, epoch, M, N = 2, 3, 8, 16
    case = _EndCase(W, 0, M, N, (2,), epoch, seed=3)
    case.error[:6] = torch.tensor([ERR_TIMEOUT_RS, sch.data_slot(W, 1, 0), epoch, 0, 1, 0], dtype=torch.int32)
    before = case.error.clone()
    t0 = time.monotonic()
    case.launch(timeout_s=30.0)
    assert time.monotonic() - t0 < 5.0, "waited for the timeout after a failure was recorded"
    assert torch.equal(case.error, before), "the first failure stays the record"
    assert case.out[case.mc :].isnan().all()


def _push(flags, halves, rows, r, parity, state, *, words, sms, splits, wait=False, to_self=False, offset=0,
          timeout_s=1.0, error=None, signature=(61, 62, 63, 64), counters=None):
    """Launch the SMs' gather (rank ``r`` of ``len(flags)``) on host tensors; returns the error
    record. Checks what every launch must leave: the programs' count and go back at 0, the tile
    counters zeroed (they start stale here)."""
    W = len(flags)
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32) if error is None else error
    counters = torch.randint(1, 100, (sch.num_counters(W),), dtype=torch.int32)
    count = torch.zeros(2, dtype=torch.int32)
    flag_bases = torch.tensor([f.data_ptr() for f in flags], dtype=torch.int64)
    alignment = align_kern.arguments(state=state, flag_bases=flag_bases, error=error, counters=counters,
                                     signature=torch.tensor(signature, dtype=torch.int32), parity=parity, rank=r,
                                     world_size=W, ready=True, timeout_s=timeout_s)
    push_kern.launch(src=rows.data_ptr(), nbytes=16 * words,
                     data_bases=torch.tensor([h.data_ptr() for h in halves], dtype=torch.int64), count=count,
                     dst_offset=offset, first_slot=sch.data_slot(W, r, 0), splits=splits, wait=wait,
                     sig_base=sch.signature_slot(W, parity, 0) - sch.region_start(W, parity), sms=sms,
                     alignment=alignment, cache={}, to_self=to_self)
    assert count.tolist() == [0, 0], "the programs' count and go must be back at 0"
    assert counters.abs().sum().item() == 0, f"tile counters left: {counters.tolist()}"
    return error


def _random_rows(W, r, words, seed):
    """``(rows, halves, offset)``: rank ``r``'s ``words`` 16-byte words of random rows, every rank's
    random data half, and our rows' offset in a half (after a 48-byte head that nothing writes)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(-2**31, 2**31 - 1, (4 * words,), generator=g, dtype=torch.int32)
    halves = [torch.randint(-2**31, 2**31 - 1, (12 + W * 4 * words,), generator=g, dtype=torch.int32)
              for _ in range(W)]
    return rows, halves, 48 + r * 16 * words


@pytest.mark.parametrize("W,r,words,sms,splits,to_self", [
    (2, 0, 1, 4, 1, False), (3, 1, 4096 + 3, 2, 2, True), (4, 3, 3 * 4096, 2, 1, False), (3, 2, 3 * 4096 - 1, 5, 4, True)])
def test_push_rows_starts_the_call_lands_our_rows_in_every_peer_then_sets_their_flags(W, r, words, sms, splits,
                                                                                       to_self):
    """Rank ``r`` of ``W`` starts a call of parity 1 on flags full of junk (the parities alternate:
    no null call) and pushes ``words`` 16-byte words into every peer's data half (random) at our
    offset: every peer holds them bit for bit there and is unchanged elsewhere, our own half is
    untouched (``to_self``: holds them too); our previous call's region is cleared and this call's
    left alone; every peer got our signature, our ready flag and our data flags of the chunk
    (``splits`` of them) and nothing else; the call is counted and the next parity is 0. Cases (the
    pushing programs besides program 0, at most ``sms - 1`` and one per tile): one word, ragged tiles
    shared by fewer programs than tiles, whole tiles by one program, a ragged last tile of three
    programs."""
    parity = 1
    rows, halves, offset = _random_rows(W, r, words, seed=words)
    before = [h.clone() for h in halves]
    flags = [torch.randint(0, 3, (sch.num_flag_slots(W),), dtype=torch.int32) for _ in range(W)]
    flags_before = [f.clone() for f in flags]
    state = torch.tensor([parity, 4, 9], dtype=torch.int32)
    error = _push(flags, halves, rows, r, parity, state, words=words, sms=sms, splits=splits, to_self=to_self,
                  offset=offset)
    assert error.tolist() == [0] * RECORD_WORDS
    assert state.tolist() == [1 - parity, 4, 10]
    at = slice(offset // 4, offset // 4 + 4 * words)
    for p in range(W):
        expected = before[p].clone()
        if p != r or to_self:
            expected[at] = rows
        assert torch.equal(halves[p], expected), f"rank {p}'s data half"
        want = flags_before[p].clone()
        if p == r:
            last = sch.region_start(W, 1 - parity)
            want[last : last + sch.region_slots(W)] = 0
        else:
            sig = sch.signature_slot(W, parity, r)
            want[sig : sig + sch.SIG_WORDS] = torch.tensor((61, 62, 63, 64), dtype=torch.int32)
            for slot in [sch.ready_slot(r)] + [sch.data_slot(W, r, s) for s in range(splits)]:
                want[sch.region_start(W, parity) + slot] = sch.SET
        assert torch.equal(flags[p], want), f"rank {p}'s flags: {(flags[p] != want).nonzero().flatten().tolist()}"


@pytest.mark.parametrize("parity", [0, 1])
def test_push_rows_runs_a_null_call_before_it_pushes(parity):
    """The device's last call used this parity too (a one-call graph replayed): rank 0 of 3, whose
    peers already arrived at the null call, must count it, clear both regions of its own flags and
    then push and announce as usual."""
    W, r, words, splits = 3, 0, 3, 2
    R, other = sch.region_slots(W), 1 - parity
    rows, halves, offset = _random_rows(W, r, words, seed=parity)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    mine = flags[r]
    mine[sch.region_start(W, parity) : sch.region_start(W, parity) + R] = 9  # the previous call's flags
    for p in (1, 2):
        mine[sch.region_start(W, other) + sch.ready_slot(p)] = sch.SET  # their null call's arrival
    state = torch.tensor([1 - parity, 2, 4], dtype=torch.int32)
    error = _push(flags, halves, rows, r, parity, state, words=words, sms=2, splits=splits, offset=offset)
    assert error.tolist() == [0] * RECORD_WORDS
    assert state.tolist() == [1 - parity, 3, 5], "a null call is counted apart from calls"
    assert mine[: 2 * R].abs().sum().item() == 0, "both regions clear: the previous call's and the null call's"
    for p in (1, 2):
        assert torch.equal(halves[p][offset // 4 : offset // 4 + 4 * words], rows)
        region = flags[p][sch.region_start(W, parity) :]
        assert region[sch.ready_slot(r)] == sch.SET and flags[p][sch.region_start(W, other) + sch.ready_slot(r)] == 1
        assert all(region[sch.data_slot(W, r, s)] == sch.SET for s in range(splits))


def _peers_sent(flags, W, r, parity, sig, splits, missing=None):
    """Every peer of rank ``r`` arrived with ``sig`` in ``flags[r]`` and sent every split of its rows,
    but ``missing``: ``(peer, split)`` never sent."""
    for p in range(W):
        if p == r:
            continue
        at = sch.signature_slot(W, parity, p)
        flags[r][at : at + sch.SIG_WORDS] = torch.tensor(sig, dtype=torch.int32)
        flags[r][sch.region_start(W, parity) + sch.ready_slot(p)] = sch.SET
        for s in range(splits):
            if (p, s) != missing:
                flags[r][sch.region_start(W, parity) + sch.data_slot(W, p, s)] = sch.SET


def test_push_rows_waits_for_every_peers_every_split():
    """With ``wait``, rank 1 of 3 returns once both peers' both splits are in: nothing recorded."""
    W, r, parity, splits, sig = 3, 1, 0, 2, (61, 62, 63, 64)
    rows, halves, offset = _random_rows(W, r, 5, seed=11)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    _peers_sent(flags, W, r, parity, sig, splits)
    state = torch.tensor([parity, 0, 3], dtype=torch.int32)
    t0 = time.monotonic()
    error = _push(flags, halves, rows, r, parity, state, words=5, sms=3, splits=splits, wait=True, offset=offset,
                  timeout_s=30.0, signature=sig)
    assert error.tolist() == [0] * RECORD_WORDS and time.monotonic() - t0 < 20.0


def test_push_rows_wait_records_a_peer_whose_rows_never_come():
    """With ``wait``, rank 0 of 3: peer 2 never sends split 1. The launch ends after its timeout with
    a record naming peer 2, that data flag, peer 2's own chunk and the call (the device's count,
    advanced by this launch), mirrored to the host; the host's error says gathered rows."""
    W, r, parity, splits, sig = 3, 0, 1, 2, (61, 62, 63, 64)
    rows, halves, offset = _random_rows(W, r, 2, seed=12)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    _peers_sent(flags, W, r, parity, sig, splits, missing=(2, 1))
    state = torch.tensor([parity, 0, 6], dtype=torch.int32)
    error, mirror = _mirrored_record()
    _push(flags, halves, rows, r, parity, state, words=2, sms=2, splits=splits, wait=True, offset=offset,
          timeout_s=0.01, error=error, signature=sig)
    assert _mirrored(error, mirror)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, seen, peer, chunk) == (ERR_TIMEOUT_AG, sch.data_slot(W, 2, 1), 7, 0, 2, 2)
    exc = exception_from_record(error.tolist(), rank=r, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and "gathered rows" in str(exc)
    assert (exc.rank, exc.peer, exc.chunk, exc.split, exc.epoch) == (0, 2, 2, 1, 7)


def test_push_rows_wait_records_a_peer_in_another_call():
    """With ``wait``: peer 1 arrived with another call's signature. A mismatch is recorded with both
    signatures at once, not a wait."""
    W, r, parity = 2, 0, 0
    mine, theirs = (61, 62, 63, 64), (61, 62, 63, 65)
    rows, halves, offset = _random_rows(W, r, 1, seed=13)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    _peers_sent(flags, W, r, parity, theirs, 1)
    state = torch.tensor([parity, 0, 0], dtype=torch.int32)
    error = _push(flags, halves, rows, r, parity, state, words=1, sms=1, splits=1, wait=True, offset=offset,
                  timeout_s=30.0, signature=mine)
    exc = exception_from_record(error.tolist(), rank=r, world_size=W, timeout_s=30.0)
    assert error[0] == ERR_MISMATCH and isinstance(exc, FluxliteCallMismatchError)
    assert exc.peer == 1 and exc.theirs == sch.describe_signature(theirs) and exc.mine == sch.describe_signature(mine)


def test_push_rows_refuses_what_it_cannot_move_in_16_byte_words():
    data = torch.zeros(8, dtype=torch.int32)
    bases = torch.tensor([data.data_ptr()] * 2, dtype=torch.int64)
    for src, nbytes, offset in ((data.data_ptr() + 4, 16, 0), (data.data_ptr(), 8, 0), (data.data_ptr(), 16, 4)):
        with pytest.raises(ValueError, match="multiples of 16"):
            push_kern.launch(src=src, nbytes=nbytes, data_bases=bases, count=torch.zeros(2, dtype=torch.int32),
                             dst_offset=offset, first_slot=0, splits=1, wait=False, sig_base=0, sms=1, alignment={},
                             cache={})


def _split_wait(flags, sig, error, epoch, rank, W, split, timeout_s, **kw):
    parity = epoch % 2
    split_wait_kern.launch(flags=flags[sch.region_start(W, parity):], sig=torch.tensor(sig, dtype=torch.int32),
                           error=error, call=torch.tensor([epoch], dtype=torch.int32),
                           first=sch.data_slot(W, 0, split), peer_stride=sch.peer_slots(), rank=rank, world_size=W,
                           sig_base=sch.signature_slot(W, parity, 0) - sch.region_start(W, parity),
                           timeout_s=timeout_s, cache={}, **kw)


def test_split_wait_returns_once_every_peer_sent_the_split():
    """Rank 1 of 3, split 1: both peers arrived with our signature and sent split 1 (not split 0,
    which this wait does not look at). Nothing is recorded and no flag changes."""
    W, epoch, split = 3, 4, 1
    sig = sch.call_signature(RS.code, 96, 16, 24, torch.float32, 2, matmul=True)
    flags = _flags_with_signature(W, sig, epoch % 2, (0, 2))
    for p in (0, 2):
        flags[_slot(W, epoch, sch.data_slot(W, p, split))] = sch.SET
    before = flags.clone()
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    _split_wait(flags, sig, error, epoch, 1, W, split, 1.0)
    assert error.tolist() == [0] * RECORD_WORDS and torch.equal(flags, before)


def test_split_wait_records_a_peer_whose_split_never_comes():
    """Rank 0 of 3: peer 1 sent split 0, peer 2 arrived but never sends it. The wait ends after its
    timeout with a record naming peer 2, the split's data flag, our chunk and the call, mirrored to
    the host, and the host's error names the split."""
    W, epoch, split = 3, 7, 0
    sig = sch.call_signature(RS.code, 96, 16, 24, torch.float32, 2, matmul=True)
    flags = _flags_with_signature(W, sig, epoch % 2, (1, 2))
    flags[_slot(W, epoch, sch.data_slot(W, 1, split))] = sch.SET
    error, mirror = _mirrored_record()
    _split_wait(flags, sig, error, epoch, 0, W, split, 0.01)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, seen, peer, chunk) == (ERR_TIMEOUT_RS, sch.data_slot(W, 2, split), epoch, 0, 2, 0)
    assert _mirrored(error, mirror)
    exc = exception_from_record(error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError)
    assert (exc.rank, exc.peer, exc.chunk, exc.split, exc.epoch) == (0, 2, 0, split, epoch)


def test_split_wait_for_one_peer_looks_at_that_peer_only():
    """AG-GEMM's matmul consumer, rank 0 of 3, waits for peer 2's rows of split 1: peer 1, which never
    sent anything, is not waited for; a second wait on peer 1's rows then times out, recorded as
    gathered rows of peer 1's chunk."""
    W, epoch, split = 3, 5, 1
    sig = sch.call_signature(AG.code, 32, 16, 24, torch.float32, 1, (False, False), matmul=True)
    flags = _flags_with_signature(W, sig, epoch % 2, (1, 2))
    flags[_slot(W, epoch, sch.data_slot(W, 2, split))] = sch.SET
    error, mirror = _mirrored_record()
    _split_wait(flags, sig, error, epoch, 0, W, split, 30.0, peer=2, code=ERR_TIMEOUT_AG)
    assert error[:MIRROR_WORD].tolist() == [0] * MIRROR_WORD
    _split_wait(flags, sig, error, epoch, 0, W, split, 0.01, peer=1, code=ERR_TIMEOUT_AG)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, seen, peer, chunk) == (ERR_TIMEOUT_AG, sch.data_slot(W, 1, split), epoch, 0, 1, 1)
    assert _mirrored(error, mirror)
    exc = exception_from_record(error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and "gathered rows" in str(exc)
    assert (exc.rank, exc.peer, exc.chunk, exc.split, exc.epoch) == (0, 1, 1, split, epoch)


def test_split_wait_for_every_peers_rows_names_each_peers_own_chunk():
    """AG-GEMM's one GEMM after the SMs' pushes, rank 1 of 3, waits for every peer's split 0: peer 0
    sent it, peer 2 never did. The record names peer 2 and its own chunk, 2 (the rows are peer 2's)."""
    W, epoch, split = 3, 7, 0
    sig = sch.call_signature(AG.code, 32, 16, 24, torch.float32, 1, (False, False), matmul=True)
    flags = _flags_with_signature(W, sig, epoch % 2, (0, 2))
    flags[_slot(W, epoch, sch.data_slot(W, 0, split))] = sch.SET
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    _split_wait(flags, sig, error, epoch, 1, W, split, 0.01, code=ERR_TIMEOUT_AG)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, seen, peer, chunk) == (ERR_TIMEOUT_AG, sch.data_slot(W, 2, split), epoch, 0, 2, 2)


def test_split_wait_records_a_peer_in_another_call():
    """Peer 1 arrived with the Triton kernel's signature of the same shapes (it runs the other
    consumer, whose partials hold no bias): a mismatch, recorded with both signatures, not a wait."""
    W, epoch = 2, 2
    mine = sch.call_signature(RS.code, 64, 16, 24, torch.float32, 2, matmul=True)
    theirs = sch.call_signature(RS.code, 64, 16, 24, torch.float32, 2)
    flags = _flags_with_signature(W, mine, epoch % 2, (1,), words=theirs)
    flags[_slot(W, epoch, sch.data_slot(W, 1, 0))] = sch.SET
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    _split_wait(flags, mine, error, epoch, 0, W, 0, 30.0)
    rec = error.tolist()
    assert rec[0] == ERR_MISMATCH and rec[4] == 1
    exc = exception_from_record(rec, rank=0, world_size=W, timeout_s=30.0)
    assert isinstance(exc, FluxliteCallMismatchError) and "consumer=matmul" in exc.mine
    assert "consumer=matmul" not in exc.theirs


def _one_shot(flags, partials, out, bias, error, epoch, rank, sig, timeout_s=1.0, scale=1.0, row0=0, chunk=-1):
    """The one-shot reduction kernel on rank ``rank`` of ``len(flags)``: every rank's flag array and
    partial, by address, as the fused state hands them over; ``out`` the sum of rows ``row0...``."""
    W = len(flags)
    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32)
    ar_kern.launch(partials=torch.tensor([p.data_ptr() for p in partials], dtype=torch.int64), out=out, bias=bias,
                   flag_bases=torch.tensor([f.data_ptr() for f in flags], dtype=torch.int64),
                   flags=flags[rank][sch.region_start(W, epoch % 2):], sig=torch.tensor(sig, dtype=torch.int32),
                   counters=counters, error=error, call=torch.tensor([epoch], dtype=torch.int32), rank=rank,
                   world_size=W, sig_base=sch.signature_slot(W, epoch % 2, 0) - sch.region_start(W, epoch % 2),
                   parity=epoch % 2, timeout_s=timeout_s, ep=Epilogue(scale=scale), config=CFG, cache={},
                   row0=row0, chunk=chunk)
    return counters


def _one_shot_ranks(W, rank, epoch, M, N, finished):
    """Flag arrays of ``W`` ranks where every peer of ``rank`` has arrived at a one-shot call of
    epoch ``epoch``, and those in ``finished`` have announced their partials; the partials."""
    sig = sch.call_signature(AR.code, M, 16, N, torch.float32, 1)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    flags[rank] = _flags_with_signature(W, sig, epoch % 2, [p for p in range(W) if p != rank])
    for p in finished:
        flags[rank][_slot(W, epoch, sch.finished_slot(W, p))] = sch.SET
    g = torch.Generator().manual_seed(M * N)
    return sig, flags, [torch.randn(M, N, generator=g) for _ in range(W)]


def test_one_shot_kernel_announces_once_and_reduces_every_partial_in_rank_order():
    """Rank 1 of 3, every peer finished: each peer's flag array gets exactly our finished flag of the
    call's region; out is scale * (P0 + P1 + P2) + bias, summed in that order, every element written."""
    W, r, epoch, M, N = 3, 1, 6, 5, 4096 + 37  # M * N: five whole tiles and a ragged rest
    sig, flags, partials = _one_shot_ranks(W, r, epoch, M, N, finished=(0, 2))
    before = [f.clone() for f in flags]
    bias = torch.randn(N)
    out = torch.full((M, N), float("nan"))
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    counters = _one_shot(flags, partials, out, bias, error, epoch, r, sig, scale=0.5)
    assert error.tolist() == [0] * RECORD_WORDS
    want = ((partials[0] + partials[1]) + partials[2]) * 0.5 + bias
    assert torch.equal(out, want), (out - want).abs().max()
    for p in (0, 2):
        before[p][_slot(W, epoch, sch.finished_slot(W, r))] = sch.SET
    assert all(torch.equal(f, b) for f, b in zip(flags, before)), "a flag other than our finished one changed"
    programs = min(-(-M * N // ar_kern.BLOCK), ar_kern.PROGRAMS_PER_SM * CFG.num_progs)
    assert counters[sch.claim_slot(W)].item() == programs, "every program claimed; the first announced"


def test_one_shot_kernel_reduces_this_ranks_rows_of_every_partial():
    """GEMM-RS's one shot, rank 2 of 3: out is the sum of rows [2 mc, 3 mc) of the three partials (the
    run starts 2 mc N elements into each), every element written, no other row read (the others NaN);
    then a peer that never finishes is recorded with this rank's chunk."""
    W, r, epoch, mc, N = 3, 2, 4, 7, 1026  # mc * N: one whole tile and a ragged rest
    sig, flags, partials = _one_shot_ranks(W, r, epoch, W * mc, N, finished=(0, 1))
    for p in partials:
        p[: r * mc].fill_(float("nan"))
    bias = torch.randn(N)
    out = torch.full((mc, N), float("nan"))
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    _one_shot(flags, partials, out, bias, error, epoch, r, sig, scale=2.0, row0=r * mc, chunk=r)
    assert error.tolist() == [0] * RECORD_WORDS
    want = ((partials[0][r * mc:] + partials[1][r * mc:]) + partials[2][r * mc:]) * 2.0 + bias
    assert torch.equal(out, want), (out - want).abs().max()
    sig, flags, partials = _one_shot_ranks(W, r, epoch, W * mc, N, finished=(0, 1))
    out.fill_(float("nan"))  # rows [1, 1 + mc): a run that starts off a multiple of 16 elements
    _one_shot(flags, partials, out, None, error, epoch, r, sig, row0=1, chunk=r)
    assert error.tolist() == [0] * RECORD_WORDS
    assert torch.equal(out, (partials[0][1 : 1 + mc] + partials[1][1 : 1 + mc]) + partials[2][1 : 1 + mc])
    sig, flags, partials = _one_shot_ranks(W, r, epoch, W * mc, N, finished=(1,))
    error, mirror = _mirrored_record()
    _one_shot(flags, partials, out, None, error, epoch, r, sig, timeout_s=0.01, row0=r * mc, chunk=r)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, peer, chunk) == (ERR_TIMEOUT_RS, sch.finished_slot(W, 0), epoch, 0, r)


def test_one_shot_kernel_records_a_peer_that_never_finishes_and_reads_no_peer():
    """Rank 0 of 3: peer 1 finished, peer 2 arrived but never announces its partial. The record names
    peer 2, its finished flag, the call and no chunk (every row); the output is this rank's own partial
    only (the peers' partials are NaN here: read, they would show)."""
    W, r, epoch, M, N = 3, 0, 9, 3, 40
    sig, flags, partials = _one_shot_ranks(W, r, epoch, M, N, finished=(1,))
    for p in (1, 2):
        partials[p].fill_(float("nan"))
    error, mirror = _mirrored_record()
    out = torch.full((M, N), float("nan"))
    _one_shot(flags, partials, out, None, error, epoch, r, sig, timeout_s=0.01)
    code, slot, call, seen, peer, chunk = error.tolist()[:6]
    assert (code, slot, call, seen, peer, chunk) == (ERR_TIMEOUT_RS, sch.finished_slot(W, 2), epoch, 0, 2, -1)
    assert _mirrored(error, mirror)
    assert torch.equal(out, partials[0])
    exc = exception_from_record(error.tolist(), rank=r, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and (exc.peer, exc.split, exc.what) == (2, 0, "partials")


def test_one_shot_kernel_records_a_peer_in_another_call():
    """Peer 1 arrived at another call (its signature differs): a mismatch, before its partial is read."""
    W, r, epoch, M, N = 2, 0, 4, 2, 24
    sig, flags, partials = _one_shot_ranks(W, r, epoch, M, N, finished=(1,))
    theirs = sch.call_signature(RS.code, M, 16, N, torch.float32, 1)
    at = sch.signature_slot(W, epoch % 2, 1)
    flags[r][at : at + sch.SIG_WORDS] = torch.tensor(theirs, dtype=torch.int32)
    partials[1].fill_(float("nan"))
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32)
    out = torch.full((M, N), float("nan"))
    _one_shot(flags, partials, out, None, error, epoch, r, sig)
    exc = exception_from_record(error.tolist(), rank=r, world_size=W, timeout_s=1.0)
    assert isinstance(exc, FluxliteCallMismatchError) and exc.theirs == sch.describe_signature(theirs)
    assert torch.equal(out, partials[0])


def _align(flags, state, parity, rank=0, timeout_s=1.0, ready=True, signature=(71, 72, 73, 74), error=None):
    """Run the alignment kernel on stale tile counters, which it must zero whatever else it does."""
    W = len(flags)
    error = torch.zeros(RECORD_WORDS, dtype=torch.int32) if error is None else error
    counters = torch.randint(1, 100, (sch.num_counters(W),), dtype=torch.int32)
    flag_bases = torch.tensor([f.data_ptr() for f in flags], dtype=torch.int64)
    align_kern.launch(**align_kern.arguments(state=state, flag_bases=flag_bases, error=error, counters=counters,
                                             signature=torch.tensor(signature, dtype=torch.int32), parity=parity,
                                             rank=rank, world_size=W, ready=ready, timeout_s=timeout_s), cache={})
    assert counters.abs().sum().item() == 0, f"tile counters left: {counters.tolist()}"
    return error


def _announced(before, after, W, parity, r, ready, signature):
    """The peers' flag arrays must differ from ``before`` exactly by rank ``r``'s arrival at a call
    of ``parity``: its signature, then (with ``ready``) its ready flag."""
    for p in range(W):
        if p == r:
            continue
        want = before[p].clone()
        at = sch.signature_slot(W, parity, r)
        want[at : at + sch.SIG_WORDS] = torch.tensor(signature, dtype=torch.int32)
        if ready:
            want[sch.region_start(W, parity) + sch.ready_slot(r)] = sch.SET
        assert torch.equal(after[p], want), f"peer {p}: {(after[p] != want).nonzero().flatten().tolist()} differ"


@pytest.mark.parametrize("ready", [True, False], ids=["ready", "pull"])
@pytest.mark.parametrize("parity", [0, 1])
def test_align_kernel_clears_the_last_calls_region_and_announces_the_call(parity, ready):
    """The parities alternate: no null call. Rank 1 of 3 must clear its previous call's region
    (junk included), leave this call's region and its signatures alone, and write its signature
    (then its ready flag, unless AG's pull producer sets it) into each peer; nothing else."""
    W, r = 3, 1
    R = sch.region_slots(W)
    flags = [torch.randint(0, 3, (sch.num_flag_slots(W),), dtype=torch.int32) for _ in range(W)]
    before = [f.clone() for f in flags]
    state = torch.tensor([parity, 5, 11], dtype=torch.int32)
    assert _align(flags, state, parity, rank=r, ready=ready).tolist() == [0] * RECORD_WORDS
    assert state.tolist() == [1 - parity, 5, 12], "the next call must use the other parity; the call is counted"
    last = sch.region_start(W, 1 - parity)
    want = before[r].clone()
    want[last : last + R] = 0
    assert torch.equal(flags[r], want), f"own flags: {(flags[r] != want).nonzero().flatten().tolist()} differ"
    _announced(before, flags, W, parity, r, ready, (71, 72, 73, 74))


@pytest.mark.parametrize("parity", [0, 1])
def test_align_kernel_runs_a_null_call_on_the_other_region(parity):
    """Rank 0 of 3; both peers already arrived at the null call. Rank 0 must clear the previous
    call's region (this parity too), set its ready flag in each peer's other region, clear its own
    other region (junk included), count the null call, then announce this call."""
    W, r, other = 3, 0, 1 - parity
    R = sch.region_slots(W)
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    base = sch.region_start(W, other)
    mine = flags[r]
    mine[sch.region_start(W, parity) : sch.region_start(W, parity) + R] = 9  # the previous call's flags
    mine[base : base + R] = torch.randint(0, 5, (R,), dtype=torch.int32)  # stale junk
    for p in (1, 2):
        mine[base + sch.ready_slot(p)] = sch.SET
    sig = sch.signature_slot(W, 0, 0)
    mine[sig:] = 3  # signatures are not a region's: kept
    before = [f.clone() for f in flags]
    state = torch.tensor([1 - parity, 2, 4], dtype=torch.int32)  # the previous call used ``parity`` too
    assert _align(flags, state, parity).tolist() == [0] * RECORD_WORDS
    assert state.tolist() == [1 - parity, 3, 5], "a null call is counted apart from calls"
    assert mine[: 2 * R].abs().sum().item() == 0, "both regions clear: the previous call's and the null call's"
    assert (mine[sig:] == 3).all()
    for p in (1, 2):
        before[p][base + sch.ready_slot(r)] = sch.SET  # the null call's arrival
    _announced(before, flags, W, parity, r, True, (71, 72, 73, 74))


def test_align_kernel_records_a_peer_that_never_arrives():
    W, parity = 2, 1
    flags = [torch.zeros(sch.num_flag_slots(W), dtype=torch.int32) for _ in range(W)]
    state = torch.tensor([0, 0, 6], dtype=torch.int32)
    error, mirror = _mirrored_record()
    _align(flags, state, parity, timeout_s=0.01, error=error)
    assert _mirrored(error, mirror)
    code, slot, call, seen, peer = error.tolist()[:5]
    assert (code, slot, call, seen, peer) == (ERR_TIMEOUT_ALIGN, sch.ready_slot(1), 7, 0, 1), "names the call it starts"
    exc = exception_from_record(error.tolist(), rank=0, world_size=W, timeout_s=0.01)
    assert isinstance(exc, FluxliteTimeoutError) and exc.peer == 1 and "parity-alignment" in str(exc)
    assert state.tolist() == [0, 1, 7]


def _protocol(rank, W, dtype):
    import fluxlite

    assert os.environ["FLUXLITE_CPU_CONSUMER"] == "triton"
    g = torch.Generator().manual_seed(11)  # the same global operands on every rank
    # K=70, 37: operands zero-padded; N=21: output rows stored by pointer, operands loaded by TMA
    for m, K, N in [(45, 64, 40), (33, 70, 24), (20, 37, 24), (16, 64, 21)]:
        A, Wt, bias = (torch.randn(W * m, K, generator=g).to(dtype), torch.randn(W * N, K, generator=g).to(dtype),
                       torch.randn(W * N, generator=g).to(dtype))
        w, b = Wt[rank * N : (rank + 1) * N], bias[rank * N : (rank + 1) * N]
        ref = A.double() @ w.double().t() + b.double()
        out, gathered = fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w, b, impl="fused", return_gathered=True,
                                         out=torch.full((W * m, N), float("nan"), dtype=dtype))
        assert torch.equal(gathered, A) and gathered.is_contiguous()  # K=70, 37: from zero-padded rows
        _close(out, ref, dtype)
        # Without return_gathered the rows are pushed into the peers' workspaces instead; a K-major
        # weight (a backward's W.t()) gets its zero padding as rows.
        _close(fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w, b, impl="fused"), ref, dtype)
        _close(fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w.t().contiguous().t(), b, impl="fused"), ref, dtype)
        # GEMM-RS: rank r holds K columns [r*K, (r+1)*K) of a [W*m, W*K] problem
        A2 = torch.randn(W * m, W * K, generator=g).to(dtype)
        W2 = torch.randn(N, W * K, generator=g).to(dtype)
        b2 = torch.randn(N, generator=g).to(dtype)
        cols = slice(rank * K, (rank + 1) * K)
        ref = (A2.double() @ W2.double().t() + b2.double())[rank * m : (rank + 1) * m]
        _close(fluxlite.gemm_rs(A2[:, cols], W2[:, cols], b2, impl="fused"), ref, dtype)


@pytest.mark.parametrize("world_size,dtype", [(2, torch.float32), (2, torch.bfloat16), (4, torch.float32)])
def test_fused_protocol_with_the_kernel_as_consumer(world_size, dtype):
    run_ranks(_protocol, world_size, dtype, env={"FLUXLITE_CPU_CONSUMER": "triton"})


@pytest.mark.parametrize("K,N,kmajor", [(69, 6, False), (69, 8, True), (72, 6, False), (72, 8, True), (72, 6, True),
                                        (69, 6, True)])
def test_kernel_operands_whose_rows_tma_cannot_load_are_made_loadable(K, N, kmajor):
    """For the Triton consumer: rows of ``a`` and the weight off 16 bytes get zero columns up to a
    multiple of 128 bytes; a K-major weight whose rows (N wide) are off 16 bytes becomes row-major.
    The torch consumer's, and rows TMA can load, are left as they are."""
    from types import SimpleNamespace

    from fluxlite.ops.op import Args, pad_for_tma

    a = torch.randn(5, K).to(torch.bfloat16)
    w = torch.randn(N, K).to(torch.bfloat16)
    w = w.t().contiguous().t() if kmajor else w
    args = Args(None, a, w, None, None, PLAIN, 1.0, {})
    assert pad_for_tma(SimpleNamespace(consumer="torch"), args) is args
    used = pad_for_tma(SimpleNamespace(consumer="triton"), args)
    k_ok, rows_ok = K % 8 == 0, (K % 8 == 0) if not kmajor else (N % 8 == 0)
    if k_ok and rows_ok:
        assert used is args
        return
    Kp = K if k_ok else -(-K // 64) * 64
    assert used.a.shape == (5, Kp) and used.weight.shape == (N, Kp)
    assert used.weight.is_contiguous() == (not kmajor or not rows_ok)  # a K-major weight stays so if TMA reads it
    assert torch.equal(used.a[:, :K], a) and torch.equal(used.weight[:, :K], w)
    assert not used.a[:, K:].any() and not used.weight[:, K:].any()


def test_gemm_ar_pads_for_its_kernel_only_in_two_shots():
    """One-shot GEMM-AllReduce computes its partial with cuBLAS (any K): its operands stay as given."""
    from types import SimpleNamespace

    from fluxlite.ops.op import Args

    state = SimpleNamespace(consumer="triton", ws=SimpleNamespace(world_size=2))
    w = torch.randn(4096, 69).to(torch.bfloat16)
    small = Args(None, torch.randn(4, 69).to(torch.bfloat16), w, None, None, PLAIN, 1.0, {})
    large = Args(None, torch.randn(1 << 13, 69).to(torch.bfloat16), w, None, None, PLAIN, 1.0, {})
    assert AR.one_shot(2, 4, 4096, 2) and not AR.one_shot(2, 1 << 13, 4096, 2)
    assert AR.kernel_operands(state, small) is small
    assert AR.kernel_operands(state, large).a.shape == (1 << 13, 128)


@triton.jit
def _longer_kernel(out_ptr, timeout_ns, DIVISOR: tl.constexpr):
    tl.store(out_ptr, longer(timeout_ns, DIVISOR))


@pytest.mark.parametrize("timeout_ns", [1, 10**9, 2 * 10**9, 2**31 - 1, 2**31, 15 * 10**9, int(9.2e18)])
@pytest.mark.parametrize("divisor", [1, 8])
def test_a_longer_bound_neither_wraps_nor_exceeds_int64(timeout_ns, divisor):
    """The doubled bound of the gather kernel's wait for its program 0 (divisor 1) and an arrived
    peer's eighth more (8), from the timeouts a launch passes (``int(timeout_s * 1e9)``): Triton
    types one under 2**31 as int32, where twice 2 s wrapped negative (a wait that gave up at its
    first spin); the longest timeout fluxlite takes (9.2e9 s) counts as 2**62 - 1 ns (146 years)."""
    out = torch.zeros(1, dtype=torch.int64)
    _longer_kernel[(1,)](out, timeout_ns, DIVISOR=divisor)
    t = min(timeout_ns, 2**62 - 1)
    assert out.item() == t + t // divisor
