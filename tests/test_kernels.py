"""The Triton kernels under the interpreter (CPU, ``TRITON_INTERPRET=1`` from conftest), on small
shapes: the plain GEMM core, the AG consumer's flag waits and timeout record, the RS producer's
partials and counters, and the whole fused protocol with the kernel as the consumer on 2 and 4
gloo ranks (``FLUXLITE_CPU_CONSUMER=triton``).

bf16 is upcast to fp32 inside the kernel under the interpreter (its bf16 arithmetic is broken), and
its fp32->bf16 store truncates: bf16 tolerances allow two bf16 ulps of the reference's scale.
"""

from __future__ import annotations

import os

import pytest
import torch

from fluxlite import schedule as sch
from fluxlite.kernels import fused_gemm as kern
from fluxlite.kernels import pull_chunks as pull_kern

from .dist_utils import run_ranks

CFG = kern.INTERPRET_CONFIG
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
pytestmark = pytest.mark.skipif(not kern.interpreting(), reason="interpreter tests (CUDA present: see tests/test_gpu_fused.py)")


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
    kern.gemm(a, weight, b, out=out)
    _close(out, a.double() @ w.double().t() + b.double(), dtype)


def _ag_launch(A, w, m, flags, error, epoch, timeout_s, out):
    W = A.shape[0] // m
    s = sch.ag_schedule(W, 0, m, CFG.block_m, 2)
    kern.launch(kern.MODE_AG, a=A, weight=w, out=out, blocks=s.blocks, chunk_rows=m, rank=0, world_size=W,
                flags=flags, error=error, epoch=epoch, timeout_s=timeout_s, config=CFG, max_splits=sch.MAX_SPLITS,
                counters=torch.zeros(W * sch.MAX_SPLITS + 1, dtype=torch.int32))


def test_ag_consumer_reads_every_ready_chunk():
    W, m, K, N = 2, 45, 64, 40
    g = torch.Generator().manual_seed(3)
    A, w = torch.randn(W * m, K, generator=g), torch.randn(N, K, generator=g)
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    for c in range(W):
        for s in range(2):
            flags[sch.ag_data_slot(W, c, s)] = 7  # ready since epoch 7; we wait for epoch 5
    error = torch.zeros(8, dtype=torch.int32)
    out = torch.full((W * m, N), float("nan"))
    _ag_launch(A, w, m, flags, error, 5, 1.0, out)
    assert error.tolist() == [0] * 8
    _close(out, A.double() @ w.double().t(), torch.float32)


def test_ag_consumer_timeout_records_and_releases_the_producer():
    W, m, K, N = 2, 40, 32, 32
    A, w = torch.randn(W * m, K), torch.randn(N, K)
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    for s in range(2):
        flags[sch.ag_data_slot(W, 0, s)] = 9  # the local chunk is there, chunk 1 never comes
    error = torch.zeros(8, dtype=torch.int32)
    _ag_launch(A, w, m, flags, error, 9, 0.01, torch.empty(W * m, N))
    code, slot, epoch, seen, peer, chunk, split, _ = error.tolist()
    assert (code, slot, epoch, seen, peer, chunk) == (1, sch.ag_data_slot(W, 1, 0), 9, 0, 1, 1)
    assert flags[: W].tolist() == [9, 9], "the producer's waits on peers' staged flags were not released"


def test_rs_kernel_pushes_partials_counts_tiles_and_reduces():
    W, r, K, N, mc = 2, 0, 48, 40, 37
    g = torch.Generator().manual_seed(5)
    a, w, b = torch.randn(W * mc, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    s = sch.rs_schedule(W, r, mc, CFG.block_m, 2)
    peer_partial = torch.randn(mc, N, generator=g)
    recv = torch.full((W, mc, N), float("nan"))
    recv[1] = peer_partial
    partial = torch.full((W, mc, N), float("nan"))
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    for sp in range(2):
        flags[sch.rs_recv_slot(W, 1, sp)] = 4
    counters = torch.zeros(W * sch.MAX_SPLITS + 1, dtype=torch.int32)
    error = torch.zeros(8, dtype=torch.int32)
    out = torch.full((mc, N), float("nan"))
    kern.launch(kern.MODE_RS, a=a, weight=w, out=out, blocks=s.blocks, chunk_rows=mc, rank=r, world_size=W,
                flags=flags, error=error, epoch=4, timeout_s=1.0, config=CFG, max_splits=sch.MAX_SPLITS, bias=b,
                partial=partial, recv=recv, counters=counters)
    full = a.double() @ w.double().t()
    _close(partial[1], full[mc:], torch.float32)
    _close(out, full[:mc] + peer_partial.double() + b.double(), torch.float32)
    n_tiles = -(-N // CFG.block_n)
    assert [counters[sch.rs_counter_slot(1, sp)].item() for sp in range(2)] == [
        len(s.split_blocks(sp)) * n_tiles for sp in range(2)]
    assert error.tolist() == [0] * 8


@pytest.mark.parametrize("defer", [True, False], ids=["deferred", "at-once"])
@pytest.mark.parametrize("transport", ["pull", "remote"])
def test_rs_kernel_tells_the_destination_when_a_split_is_complete(transport, defer):
    """pull/remote: the tile that completes (dst, split) sets the destination's staged/recv flag;
    remote: the tiles land in the destination's recv buffer, slot ``rank``."""
    W, r, K, N, mc, epoch = 2, 0, 48, 40, 37, 6
    g = torch.Generator().manual_seed(7)
    a, w = torch.randn(W * mc, K, generator=g), torch.randn(N, K, generator=g)
    s = sch.rs_schedule(W, r, mc, CFG.block_m, 2)
    recv = torch.randn(W, mc, N, generator=g)
    peer_recv = torch.full((W, mc, N), float("nan"))
    partial = torch.full((W, mc, N), float("nan"))
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    peer_flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    for sp in range(2):
        flags[sch.rs_recv_slot(W, 1, sp)] = epoch
    counters = torch.zeros(W * sch.MAX_SPLITS + 1, dtype=torch.int32)
    error = torch.zeros(8, dtype=torch.int32)
    out = torch.full((mc, N), float("nan"))
    kern.launch(kern.MODE_RS, a=a, weight=w, out=out, blocks=s.blocks, chunk_rows=mc, rank=r, world_size=W,
                flags=flags, error=error, epoch=epoch, timeout_s=1.0, config=CFG, max_splits=sch.MAX_SPLITS,
                partial=partial, recv=recv, counters=counters, splits=s.splits, rs_transport=transport,
                defer_publish=defer,
                peer_flags=torch.tensor([flags.data_ptr(), peer_flags.data_ptr()], dtype=torch.int64),
                peer_ptrs=torch.tensor([recv.data_ptr(), peer_recv.data_ptr()], dtype=torch.int64))
    full = a.double() @ w.double().t()
    _close(peer_recv[r] if transport == "remote" else partial[1], full[mc:], torch.float32)
    _close(out, full[:mc] + recv[1].double(), torch.float32)
    slot = sch.rs_staged_slot if transport == "pull" else sch.rs_recv_slot
    assert [peer_flags[slot(W, r, sp)].item() for sp in range(2)] == [epoch, epoch]
    assert int(peer_flags.count_nonzero()) == 2, "only the completed splits' flags may be set"
    assert error.tolist() == [0] * 8


def test_pull_chunks_copies_every_peer_split_and_sets_its_flag():
    """The SM-copy AG producer: every peer's staged rows land in the gathered buffer, and each
    (peer, split) data flag is set once all programs stored their share; the local chunk is untouched."""
    W, r, m, K, epoch = 3, 1, 37, 70, 5
    g = torch.Generator().manual_seed(9)
    staged = [torch.randn(m, K, generator=g) for _ in range(W)]
    gathered = torch.full((W * m, K), float("nan"))
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    flags[:W] = epoch  # every peer's rows are staged
    counters = torch.zeros(W * sch.MAX_SPLITS + 1, dtype=torch.int32)
    error = torch.zeros(8, dtype=torch.int32)
    s = sch.ag_schedule(W, r, m, CFG.block_m, 2)
    split_rows = torch.tensor([s.split_rows(i)[0] for i in range(s.splits)] + [m], dtype=torch.int32)
    pull_kern.launch(peer_ptrs=torch.tensor([t.data_ptr() for t in staged], dtype=torch.int64), gathered=gathered,
                     flags=flags, counters=counters, error=error, split_rows=split_rows, m=m, rank=r, world_size=W,
                     epoch=epoch, timeout_s=1.0, max_splits=sch.MAX_SPLITS, config=pull_kern.INTERPRET_PULL_CONFIG,
                     interpret=True)
    for p in range(W):
        rows = gathered[p * m : (p + 1) * m]
        if p == r:
            assert rows.isnan().all(), "the local chunk is the copy engine's, not the pull kernel's"
        else:
            assert torch.equal(rows, staged[p])
        assert [flags[sch.ag_data_slot(W, p, sp)].item() for sp in range(2)] == ([0, 0] if p == r else [epoch] * 2)
    assert error.tolist() == [0] * 8


def test_pull_chunks_times_out_on_a_peer_that_never_stages():
    W, r, m, K = 2, 0, 8, 16
    gathered = torch.full((W * m, K), float("nan"))
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    error = torch.zeros(8, dtype=torch.int32)
    pull_kern.launch(peer_ptrs=torch.tensor([gathered.data_ptr()] * W, dtype=torch.int64), gathered=gathered,
                     flags=flags, counters=torch.zeros(W * sch.MAX_SPLITS + 1, dtype=torch.int32), error=error,
                     split_rows=torch.tensor([0, m], dtype=torch.int32), m=m, rank=r, world_size=W, epoch=3,
                     timeout_s=0.002, max_splits=sch.MAX_SPLITS, config=pull_kern.INTERPRET_PULL_CONFIG, interpret=True)
    from fluxlite.errors import ERR_AG_STAGED

    assert error[0].item() == ERR_AG_STAGED and error[2].item() == 3 and error[4].item() == 1  # code, epoch, peer
    assert flags[sch.ag_data_slot(W, 1, 0)].item() == 0 and gathered.isnan().all()


def _sm_producer(rank, W):
    import fluxlite
    from fluxlite import _fused

    assert os.environ["FLUXLITE_CPU_CONSUMER"] == "torch"
    _fused.TUNING.ag_producer = "sm"
    g = torch.Generator().manual_seed(13)
    for m, K, N in [(45, 64, 40), (130, 33, 24)]:
        A, w = torch.randn(W * m, K, generator=g), torch.randn(N, K, generator=g)
        out, gathered = fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w, impl="fused", return_gathered=True)
        assert torch.equal(gathered, A)
        _close(out, A.double() @ w.double().t(), torch.float32)


@pytest.mark.parametrize("world_size", [2, 3])
def test_fused_ag_with_the_sm_copy_producer(world_size):
    run_ranks(_sm_producer, world_size, env={"FLUXLITE_CPU_CONSUMER": "torch"})


def _protocol(rank, W, dtype):
    import fluxlite
    from fluxlite import _fused

    assert os.environ["FLUXLITE_CPU_CONSUMER"] == "triton"
    g = torch.Generator().manual_seed(11)  # the same global operands on every rank
    for m, K, N in [(45, 64, 40), (33, 70, 24)]:
        A, Wt, bias = (torch.randn(W * m, K, generator=g).to(dtype), torch.randn(W * N, K, generator=g).to(dtype),
                       torch.randn(W * N, generator=g).to(dtype))
        w, b = Wt[rank * N : (rank + 1) * N], bias[rank * N : (rank + 1) * N]
        ref = A.double() @ w.double().t() + b.double()
        for in_place in (True, False):  # the local rows read from ``a``, or copied into the gathered buffer
            _fused.TUNING.ag_local_in_place = in_place
            out, gathered = fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w, b, impl="fused", return_gathered=True,
                                             out=torch.full((W * m, N), float("nan"), dtype=dtype))
            assert torch.equal(gathered, A)
            _close(out, ref, dtype)
            # Without return_gathered the rows are pushed into the peers' workspaces instead.
            _close(fluxlite.ag_gemm(A[rank * m : (rank + 1) * m], w, b, impl="fused"), ref, dtype)
        # GEMM-RS: rank r holds K columns [r*K, (r+1)*K) of a [W*m, W*K] problem
        A2 = torch.randn(W * m, W * K, generator=g).to(dtype)
        W2 = torch.randn(N, W * K, generator=g).to(dtype)
        b2 = torch.randn(N, generator=g).to(dtype)
        cols = slice(rank * K, (rank + 1) * K)
        ref = (A2.double() @ W2.double().t() + b2.double())[rank * m : (rank + 1) * m]
        for transport in kern.RS_TRANSPORTS:
            _fused.TUNING.rs_transport = transport
            out = fluxlite.gemm_rs(A2[:, cols], W2[:, cols], b2, impl="fused")
            _close(out, ref, dtype)


@pytest.mark.parametrize("world_size,dtype", [(2, torch.float32), (2, torch.bfloat16), (4, torch.float32)])
def test_fused_protocol_with_the_kernel_as_consumer(world_size, dtype):
    run_ranks(_protocol, world_size, dtype, env={"FLUXLITE_CPU_CONSUMER": "triton"})
