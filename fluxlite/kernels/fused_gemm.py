"""Persistent GEMM that overlaps tensor-parallel communication with compute, tile by tile.

Math
----
For every tile (row block ``i`` of the schedule, column block ``j``)::

    acc[r, c] = sum_k A[row(i) + r, k] * B[j*BLOCK_N + c, k]      (B: [N, K], nn.Linear layout; fp32)

then the epilogue, by ``MODE``:

- ``MODE_AG`` (AllGather-GEMM consumer). Row block ``i`` belongs to chunk ``c`` (rank ``c``'s rows).
  It waits until its ``(chunk, split)`` flag reaches ``epoch`` (the producer put those rows into
  the gathered buffer ``A = [W*m, K]``), then reads them there. With ``A_LOCAL`` the local chunk
  (first in the schedule) is read in place from ``a_local = a [m, K]``, with no wait.
  ``out[c*chunk_rows + row] = acc (+ bias)``. With ``world_size == 1`` nothing waits: a plain GEMM.
- ``MODE_RS`` (GEMM-ReduceScatter). A is the local ``a: [M, K_local]``. A block of a peer's chunk
  ``d`` stores ``acc`` (in the input dtype) and adds one to the ``(d, split)`` counter. Where the
  tile goes, by ``RS_TRANSPORT``:

  - ``RS_PUSH``: into the local ``partial[d]``; the producer's copy engine waits for the full
    counter and pushes the split into ``d.recv[rank]``, then sets ``d``'s recv flag.
  - ``RS_PULL``: into ``partial[d]`` (symmetric); the tile that completes the split sets ``d``'s
    *staged* flag, and ``d``'s copy engine pulls the split, then sets its own recv flag.
  - ``RS_REMOTE``: straight into ``d.recv[rank]`` over NVLink (a TMA descriptor made on the device
    from ``peer_ptrs[d]``); the tile that completes the split sets ``d``'s recv flag.

  A block of the local chunk waits for every peer's ``(peer, split)`` recv flag, then
  ``out[row] = acc + sum_p recv[p, row] (+ bias)``, summed in fp32 in a fixed order (bit-stable).

The grid is persistent: ``NUM_PROGS`` programs walk tile ids ``pid, pid + NUM_PROGS, ...``
(static), or claim the next tile id from an atomic counter (``DYNAMIC``). GEMM-RS claims
dynamically: then no tile of the local chunk (which waits on peers) is taken before every tile the
peers wait on (which waits on nothing) has been taken by a running program, so the kernel cannot
deadlock across ranks even when other kernels hold some SMs and not all programs are resident
(and it runs under the interpreter, where programs run one after another). Tile ids follow the schedule's block order, ``GROUP_M`` blocks at a time across all column blocks
(L2 reuse of B), so the whole GPU moves through the chunks in the order the data arrives (AG) or
must leave (RS). Every wait is bounded (see :mod:`fluxlite.kernels.flags`).

Loads and stores go through TMA descriptors (``USE_TMA``) when rows are 16-byte aligned, else masked
pointer accesses. Outputs, partials and received partials are 3-D descriptors ``[chunks,
chunk_rows, N]``: TMA clips a ragged last block at its chunk's end, so it never writes the next
chunk's rows (and the epilogue needs no pointer tensors: without TMA the RS kernel spills).
``DEFER_PUBLISH`` (RS) counts a stored peer tile only after the program's next main loop (and before
any wait on the peers), so the wait for its stores to land, an NVLink round trip for a remote store,
is hidden. ``EARLY_REDUCE`` (RS) starts a local tile's accumulator from the peers' partials instead of adding
them in the epilogue, so their loads overlap the main loop. ``UPCAST`` computes the dot in fp32 (the Triton interpreter's
bf16 arithmetic is broken; GPU code keeps native bf16/fp16).
"""

import triton
import triton.language as tl

from .. import errors
from .flags import drain_tma_stores, signal_add, wait_epoch

MODE_AG = tl.constexpr(1)
MODE_RS = tl.constexpr(2)
ERR_AG_DATA = tl.constexpr(errors.ERR_AG_DATA)  # what a timed-out wait records
ERR_RS_PARTIAL = tl.constexpr(errors.ERR_RS_PARTIAL)
RS_PUSH = tl.constexpr(0)  # how a GEMM-RS partial reaches its destination (see the docstring)
RS_PULL = tl.constexpr(1)
RS_REMOTE = tl.constexpr(2)
RS_TRANSPORTS = {"push": 0, "pull": 1, "remote": 2}


@triton.jit
def _tile_coords(tile, num_blocks, num_n, GROUP_M: tl.constexpr):
    """Tile id -> (row block index in schedule order, column block index), grouped by GROUP_M."""
    per_group = GROUP_M * num_n
    first = (tile // per_group) * GROUP_M
    size = tl.minimum(num_blocks - first, GROUP_M)
    return first + (tile % per_group) % size, (tile % per_group) // size


@triton.jit
def _mainloop(acc, a_desc, b_desc, a_row, a_row_limit, n0, N, K,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              B_KMAJOR: tl.constexpr, USE_TMA: tl.constexpr, UPCAST: tl.constexpr):
    """acc += A[a_row : a_row + BLOCK_M, :] @ B[n0 : n0 + BLOCK_N, :].T in fp32.

    ``B_KMAJOR``: ``b_desc`` covers ``B.T`` (``[K, N]`` row-major, e.g. a backward's ``W.t()``) instead
    of ``B`` (``[N, K]``), so a transposed weight needs no copy.
    With USE_TMA the descriptors zero-fill out-of-range rows/columns; otherwise ``a_desc``/``b_desc``
    are plain pointers to contiguous row-major tensors and the loads are masked.
    """
    if USE_TMA:
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([a_row, k * BLOCK_K])
            if B_KMAJOR:
                b = b_desc.load([k * BLOCK_K, n0])
            else:
                b = b_desc.load([n0, k * BLOCK_K]).T
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
    else:
        offs_m = a_row + tl.arange(0, BLOCK_M)
        offs_n = n0 + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        m_ok = offs_m < a_row_limit
        n_ok = offs_n < N
        a_ptrs = a_desc + offs_m.to(tl.int64)[:, None] * K + offs_k[None, :]
        if B_KMAJOR:
            b_ptrs = b_desc + offs_k.to(tl.int64)[:, None] * N + offs_n[None, :]
            b_step = BLOCK_K * N
        else:
            b_ptrs = b_desc + offs_n.to(tl.int64)[None, :] * K + offs_k[:, None]
            b_step = BLOCK_K
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_ok = (k * BLOCK_K + offs_k) < K
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += b_step
    return acc


@triton.jit
def _store_tile(dst, tile, chunk, row0, n0, rows_ptr_base, offs_r, offs_n, mask, N, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr):
    """dst[chunk, row0 : row0 + BLOCK_M, n0 : n0 + BLOCK_N] = tile (rows past the chunk are dropped).

    TMA: ``dst`` is a 3-D descriptor over ``[chunks, chunk_rows, N]``, which clips the rows at the
    chunk's end. Pointers: ``dst`` points at the flat ``[rows, N]`` array and ``rows_ptr_base`` is
    the chunk's first row.
    """
    if USE_TMA:
        dst.store([chunk, row0, n0], tile.reshape(1, BLOCK_M, BLOCK_N))
    else:
        rows64 = (rows_ptr_base + row0 + offs_r).to(tl.int64)
        tl.store(dst + rows64[:, None] * N + offs_n[None, :], tile, mask=mask)


@triton.jit
def _add_received(acc, recv, flags_ptr, error_ptr, rank, world_size, chunk_rows, row0, n0, offs_r, offs_n, mask,
                  split, N, epoch, timeout_ns, MAX_SPLITS: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, RS_TRANSPORT: tl.constexpr, USE_TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """acc += sum over peers p of recv[p, row0 + r, n], each after p's (p, split) flag reaches epoch."""
    for p in range(0, world_size):
        if p != rank:
            slot = world_size + world_size * MAX_SPLITS + p * MAX_SPLITS + split
            err = wait_epoch(flags_ptr + slot, epoch, error_ptr, timeout_ns, ERR_RS_PARTIAL, slot, p, rank, split,
                             INTERPRET)
            if RS_TRANSPORT == RS_PULL:
                if err != 0:
                    # Our producer's stream waits for the peers' "staged" flags, which a missing peer
                    # never sets: release them so the stream drains and the host raises, not hangs.
                    staged = world_size + 2 * world_size * MAX_SPLITS  # schedule.rs_staged_slot(W, 0, 0)
                    for q in range(0, world_size * MAX_SPLITS):
                        tl.atomic_max(flags_ptr + staged + q, epoch, sem="relaxed", scope="sys")
            if USE_TMA:
                part = recv.load([p, row0, n0]).reshape(BLOCK_M, BLOCK_N)
            else:
                rows64 = (p * chunk_rows + row0 + offs_r).to(tl.int64)
                part = tl.load(recv + rows64[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
            acc += part.to(tl.float32)
    return acc


@triton.jit
def _store_partial(tile, partial, peer_ptrs, chunk, row0, n0, offs_r, offs_n, mask, chunk_rows, N, rank, world_size,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RS_TRANSPORT: tl.constexpr, USE_TMA: tl.constexpr):
    """A peer chunk's tile: store it where ``RS_TRANSPORT`` says (see :func:`_publish_partial`)."""
    if RS_TRANSPORT == RS_REMOTE:
        # chunk's recv buffer [W, chunk_rows, N], slot ``rank``: a peer's memory, mapped here.
        base = tl.load(peer_ptrs + chunk).to(tl.pointer_type(tile.dtype))
        if USE_TMA:
            dst = tl.make_tensor_descriptor(base, shape=[world_size, chunk_rows, N], strides=[chunk_rows * N, N, 1],
                                            block_shape=[1, BLOCK_M, BLOCK_N])
        else:
            dst = base
        _store_tile(dst, tile, rank, row0, n0, rank * chunk_rows, offs_r, offs_n, mask, N, BLOCK_M, BLOCK_N, USE_TMA)
    else:
        _store_tile(partial, tile, chunk, row0, n0, chunk * chunk_rows, offs_r, offs_n, mask, N,
                    BLOCK_M, BLOCK_N, USE_TMA)


@triton.jit
def _publish_partial(chunk, split, peer_flags, counters_ptr, num_blocks, num_n, rank, world_size, splits, epoch,
                     MAX_SPLITS: tl.constexpr, RS_TRANSPORT: tl.constexpr, USE_TMA: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """Once the stored tile of (chunk, split) is in memory, count it; the tile that completes the
    split tells the destination (pull: its staged flag, remote: its recv flag; push: the producer
    watches the counter). ``chunk < 0``: nothing to publish."""
    if chunk >= 0:
        if USE_TMA:
            drain_tma_stores(INTERPRET)
        done = signal_add(counters_ptr + chunk * MAX_SPLITS + split, 1)
        if RS_TRANSPORT != RS_PUSH:
            blocks_per_chunk = num_blocks // world_size
            tiles = ((split + 1) * blocks_per_chunk // splits - split * blocks_per_chunk // splits) * num_n
            if done == tiles - 1:
                if RS_TRANSPORT == RS_PULL:
                    slot = world_size + 2 * world_size * MAX_SPLITS + rank * MAX_SPLITS + split  # rs_staged_slot
                else:
                    slot = world_size + world_size * MAX_SPLITS + rank * MAX_SPLITS + split  # rs_recv_slot
                flags = tl.load(peer_flags + chunk).to(tl.pointer_type(tl.int32))
                tl.atomic_max(flags + slot, epoch, sem="release", scope="sys")


# Values that change from call to call must not be specialised on (Triton specialises ints equal to
# 1 and divisible by 16), or each new epoch or row count would compile a new kernel.
@triton.jit(do_not_specialize=["num_blocks", "chunk_rows", "rank", "world_size", "splits", "epoch", "timeout_ns"])
def fused_gemm_kernel(
    a_desc,            # AG: the gathered buffer [W*m, K] (the producer fills it); RS: a [M, K_local]
    a_local,           # AG with A_LOCAL: this rank's rows a [m, K], read in place; else unused
    b_desc,            # weight [N, K], or weight.T [K, N] when B_KMAJOR
    out,               # AG: [W*m, N] as [W, m, N]; RS: [M/W, N] as [1, M/W, N] (TMA descriptor or pointer)
    bias_ptr,          # [N] or unused
    partial,           # RS: [W, M/W, N] our partials of peers' rows; AG: unused
    recv,              # RS: [W, M/W, N] peers' partials of our rows (symmetric buffer); AG: unused
    blocks_ptr,        # int32 [num_blocks, 4]: (chunk, row0, rows, split), in schedule order
    flags_ptr,         # int32 local flag array (schedule.num_flag_slots)
    peer_flags,        # RS pull/remote: int64 [W], every rank's flag array address (mapped here); else unused
    peer_ptrs,         # RS remote: int64 [W], every rank's recv buffer address (mapped here); else unused
    counters_ptr,      # int32 [W * MAX_SPLITS + 1], zeroed per call: RS tile counters, then the tile claim counter
    error_ptr,         # int32 [8] error record
    num_blocks, chunk_rows, N, K, rank, world_size, splits, epoch, timeout_ns,
    MODE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_PROGS: tl.constexpr,
    DYNAMIC: tl.constexpr,
    EARLY_REDUCE: tl.constexpr,
    RS_TRANSPORT: tl.constexpr,
    DEFER_PUBLISH: tl.constexpr,
    A_LOCAL: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    USE_TMA: tl.constexpr,
    UPCAST: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_blocks * num_n
    out_dtype = out.dtype if USE_TMA else out.dtype.element_ty
    offs_r = tl.arange(0, BLOCK_M)
    ready_slot = tl.full((), -1, tl.int32)  # last AG flag slot this program saw ready: no re-polling
    # RS with DEFER_PUBLISH: the peer tile stored last, published after the next main loop, by when
    # its stores have long landed (a remote store's completion is an NVLink round trip).
    pending_chunk = tl.full((), -1, tl.int32)
    pending_split = tl.full((), 0, tl.int32)
    if A_LOCAL:
        if USE_TMA:
            src = tl.make_tensor_descriptor(a_local, shape=[chunk_rows, K], strides=[K, 1],
                                            block_shape=[BLOCK_M, BLOCK_K])
            src_is_local = tl.full((), 1, tl.int32)

    if DYNAMIC:
        tile = tl.atomic_add(counters_ptr + world_size * MAX_SPLITS, 1, sem="relaxed", scope="gpu")
    else:
        tile = pid
    while tile < num_tiles:
        # Claim the next tile now, so the atomic's latency hides behind this tile's main loop.
        if DYNAMIC:
            next_tile = tl.atomic_add(counters_ptr + world_size * MAX_SPLITS, 1, sem="relaxed", scope="gpu")
        else:
            next_tile = tile + NUM_PROGS
        i, j = _tile_coords(tile, num_blocks, num_n, GROUP_M)
        chunk = tl.load(blocks_ptr + 4 * i)
        row0 = tl.load(blocks_ptr + 4 * i + 1)
        rows = tl.load(blocks_ptr + 4 * i + 2)
        split = tl.load(blocks_ptr + 4 * i + 3)
        n0 = j * BLOCK_N

        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        mask = (offs_r < rows)[:, None] & col_ok[None, :]
        local_rs = chunk == rank
        if MODE != MODE_RS:
            local_rs = False
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if EARLY_REDUCE:
            # Start the local tile's accumulator from the peers' partials (pushed long ago), so
            # their loads overlap the main loop's first TMA loads instead of stalling the epilogue.
            if local_rs:
                # Never wait on the peers while holding back what they wait on.
                _publish_partial(pending_chunk, pending_split, peer_flags, counters_ptr, num_blocks, num_n, rank,
                                 world_size, splits, epoch, MAX_SPLITS, RS_TRANSPORT, USE_TMA, INTERPRET)
                pending_chunk = -1
                acc = _add_received(acc, recv, flags_ptr, error_ptr, rank, world_size, chunk_rows, row0, n0, offs_r,
                                    offs_n, mask, split, N, epoch, timeout_ns, MAX_SPLITS, BLOCK_M, BLOCK_N,
                                    RS_TRANSPORT, USE_TMA, INTERPRET)

        if MODE == MODE_AG:
            slot = world_size + chunk * MAX_SPLITS + split
            must_wait = world_size > 1
            if A_LOCAL:
                must_wait = must_wait & (chunk != rank)  # read in place from ``a``: nothing to wait for
            if must_wait:
                if slot != ready_slot:
                    err = wait_epoch(flags_ptr + slot, epoch, error_ptr, timeout_ns, ERR_AG_DATA,
                                     slot, chunk, chunk, split, INTERPRET)
                    if err == 0:
                        ready_slot = slot
                    else:
                        # Unblock our producer's waits on peers' "staged" flags, so its stream
                        # drains and the host can raise instead of hanging.
                        for p in range(0, world_size):
                            tl.atomic_max(flags_ptr + p, epoch, sem="relaxed", scope="sys")
            out_row0 = chunk * chunk_rows + row0
            if A_LOCAL:
                # The local rows straight from ``a``, the peers' from the gathered buffer, in one
                # main loop over one descriptor variable, remade on the device only when the source
                # changes (local chunk first: about twice per program). A second loop over a second
                # descriptor would need a second set of pipeline buffers, more than an SM has.
                is_local = (chunk == rank).to(tl.int32)
                a_row = out_row0
                a_rows = world_size * chunk_rows
                if chunk == rank:
                    a_row = row0
                    a_rows = chunk_rows
                if USE_TMA:
                    if is_local != src_is_local:
                        if is_local == 1:
                            src = tl.make_tensor_descriptor(a_local, shape=[chunk_rows, K], strides=[K, 1],
                                                            block_shape=[BLOCK_M, BLOCK_K])
                        else:
                            src = tl.make_tensor_descriptor(a_desc, shape=[world_size * chunk_rows, K],
                                                            strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
                        src_is_local = is_local
                    acc = _mainloop(acc, src, b_desc, a_row, a_rows, n0, N, K,
                                    BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, USE_TMA, UPCAST)
                else:
                    base = a_desc
                    if chunk == rank:
                        base = a_local
                    acc = _mainloop(acc, base, b_desc, a_row, a_rows, n0, N, K,
                                    BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, USE_TMA, UPCAST)
            else:
                acc = _mainloop(acc, a_desc, b_desc, out_row0, world_size * chunk_rows, n0, N, K,
                                BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, USE_TMA, UPCAST)
        else:
            acc = _mainloop(acc, a_desc, b_desc, chunk * chunk_rows + row0, world_size * chunk_rows, n0, N, K,
                            BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, USE_TMA, UPCAST)
            out_row0 = row0

        if MODE == MODE_RS:
            # Before any wait on the peers (a local tile's epilogue): never hold back what they wait on.
            _publish_partial(pending_chunk, pending_split, peer_flags, counters_ptr, num_blocks, num_n, rank,
                             world_size, splits, epoch, MAX_SPLITS, RS_TRANSPORT, USE_TMA, INTERPRET)
            pending_chunk = -1
        if MODE == MODE_RS and chunk != rank:
            _store_partial(acc.to(out_dtype), partial, peer_ptrs, chunk, row0, n0, offs_r, offs_n, mask, chunk_rows,
                           N, rank, world_size, BLOCK_M, BLOCK_N, RS_TRANSPORT, USE_TMA)
            if DEFER_PUBLISH:
                pending_chunk = chunk
                pending_split = split
            else:
                _publish_partial(chunk, split, peer_flags, counters_ptr, num_blocks, num_n, rank, world_size, splits,
                                 epoch, MAX_SPLITS, RS_TRANSPORT, USE_TMA, INTERPRET)
        else:
            if not EARLY_REDUCE:
                if local_rs:
                    acc = _add_received(acc, recv, flags_ptr, error_ptr, rank, world_size, chunk_rows, row0, n0, offs_r,
                                        offs_n, mask, split, N, epoch, timeout_ns, MAX_SPLITS, BLOCK_M, BLOCK_N,
                                        RS_TRANSPORT, USE_TMA, INTERPRET)
            if HAS_BIAS:
                acc += tl.load(bias_ptr + offs_n, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            if MODE == MODE_AG:
                out_chunk = chunk
            else:
                out_chunk = 0
            _store_tile(out, acc.to(out_dtype), out_chunk, row0, n0, out_row0 - row0, offs_r, offs_n, mask, N,
                        BLOCK_M, BLOCK_N, USE_TMA)
        tile = next_tile
    if MODE == MODE_RS:
        _publish_partial(pending_chunk, pending_split, peer_flags, counters_ptr, num_blocks, num_n, rank, world_size,
                         splits, epoch, MAX_SPLITS, RS_TRANSPORT, USE_TMA, INTERPRET)


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------
import os  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import lru_cache  # noqa: E402

import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass(frozen=True)
class GemmConfig:
    """Block sizes and launch shape of :func:`fused_gemm_kernel`."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    num_progs: int = 0  # 0: one program per SM (GPU), 2 under the interpreter


INTERPRET_CONFIG = GemmConfig(block_m=32, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=1, num_progs=2)


@lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs 16-byte aligned bases and row strides."""
    return all(t.data_ptr() % 16 == 0 and (t.stride(-2) * t.element_size()) % 16 == 0 for t in tensors)


def _descriptor(t: torch.Tensor, block: list[int], use_tma: bool):
    return TensorDescriptor.from_tensor(t, block) if use_tma else t


def launch(
    mode: int,
    *,
    a: torch.Tensor,
    weight: torch.Tensor,
    out: torch.Tensor,
    blocks: torch.Tensor,
    chunk_rows: int,
    rank: int,
    world_size: int,
    flags: torch.Tensor,
    error: torch.Tensor,
    epoch: int,
    timeout_s: float,
    config: GemmConfig,
    max_splits: int,
    bias: torch.Tensor | None = None,
    a_local: torch.Tensor | None = None,
    partial: torch.Tensor | None = None,
    recv: torch.Tensor | None = None,
    counters: torch.Tensor | None = None,
    dynamic: bool | None = None,
    early_reduce: bool = False,
    splits: int = 1,
    rs_transport: str = "push",
    defer_publish: bool = True,
    peer_flags: torch.Tensor | None = None,
    peer_ptrs: torch.Tensor | None = None,
) -> None:
    """Launch :func:`fused_gemm_kernel` over the schedule's ``blocks`` (see the module docstring).

    Shapes: AG: ``a`` is the gathered buffer ``[W*m, K]``, ``out [W*m, N]``; ``a_local [m, K]``
    (optional): the local rows, read in place (``A_LOCAL``). RS: ``a [M, K]``,
    ``partial``/``recv [W, M/W, N]``, ``out [M/W, N]``. ``weight [N, K]`` in both, row-major or
    the transpose of a row-major ``[K, N]`` (read in place). RS ``pull``/``remote`` also need
    ``peer_flags`` (int64 ``[W]``, every rank's flag array) and ``remote`` needs ``peer_ptrs``
    (int64 ``[W]``, every rank's ``recv``), both as addresses mapped in this process.
    """
    N, K = weight.shape
    interp = interpreting()
    cfg = config
    chunks = world_size if mode == MODE_AG else 1
    out3 = out.view(chunks, out.shape[0] // chunks, N)
    extra = [t for t in (partial, recv, a_local) if t is not None]
    b_kmajor = not weight.is_contiguous()
    b = weight.t() if b_kmajor else weight  # row-major either way
    use_tma = _tma_ok(a, b, out3, *extra)
    num_tiles = blocks.shape[0] * triton.cdiv(N, cfg.block_n)
    num_progs = cfg.num_progs or _sm_count(a.device)
    num_progs = max(1, min(num_progs, num_tiles))
    tile3 = [1, cfg.block_m, cfg.block_n]
    out_desc = _descriptor(out3, tile3, use_tma)
    is_rs = mode == MODE_RS
    if is_rs and rs_transport != "push" and peer_flags is None:
        raise ValueError(f"rs_transport={rs_transport!r} needs peer_flags (every rank's flag array)")
    if is_rs and rs_transport == "remote" and peer_ptrs is None:
        raise ValueError("rs_transport='remote' needs peer_ptrs (every rank's recv buffer)")
    if use_tma and not interp and ((is_rs and rs_transport == "remote") or (not is_rs and a_local is not None)):
        _ensure_device_descriptor_allocator()
    fused_gemm_kernel[(num_progs,)](
        a if a_local is not None else _descriptor(a, [cfg.block_m, cfg.block_k], use_tma),
        a_local if a_local is not None else a,
        _descriptor(b, [cfg.block_k, cfg.block_n] if b_kmajor else [cfg.block_n, cfg.block_k], use_tma),
        out_desc,
        bias if bias is not None else out,
        _descriptor(partial, tile3, use_tma) if partial is not None else out_desc,
        _descriptor(recv, tile3, use_tma) if recv is not None else out_desc,
        blocks, flags,
        peer_flags if peer_flags is not None else blocks,
        peer_ptrs if peer_ptrs is not None else blocks,
        counters if counters is not None else flags,
        error,
        blocks.shape[0], chunk_rows, N, K, rank, world_size, splits, epoch, int(timeout_s * 1e9),
        MODE=mode,
        HAS_BIAS=bias is not None,
        MAX_SPLITS=max_splits,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        NUM_PROGS=num_progs,
        DYNAMIC=(mode == MODE_RS) if dynamic is None else dynamic,
        EARLY_REDUCE=early_reduce,
        RS_TRANSPORT=RS_TRANSPORTS[rs_transport] if is_rs else RS_TRANSPORTS["push"],
        DEFER_PUBLISH=is_rs and defer_publish,
        A_LOCAL=not is_rs and a_local is not None,
        B_KMAJOR=b_kmajor,
        USE_TMA=use_tma,
        UPCAST=interp and a.dtype == torch.bfloat16,
        INTERPRET=interp,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_device_descriptor_allocator() -> None:
    """TMA descriptors made on the device live in per-launch global scratch that Triton asks the
    host to allocate; give it the caching allocator. Set on every such launch: Triton keeps the
    allocator in a context variable, so one set on the main thread is not seen by autograd's
    backward thread (measured: the layers' backward launches failed without it)."""
    triton.set_allocator(_scratch)


_PLAIN: dict[tuple, tuple[torch.Tensor, ...]] = {}


def gemm(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
         config: GemmConfig | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """The same kernel as a plain GEMM, with no communication: ``a [M, K] @ weight[N, K].T (+ bias)``.

    A one-rank AG schedule: nothing waits. Used to measure the GEMM alone and to check the core.
    """
    from ..schedule import MAX_SPLITS, ag_schedule, num_flag_slots

    cfg = config or (INTERPRET_CONFIG if interpreting() else GemmConfig())
    M = a.shape[0]
    key = (M, cfg.block_m, str(a.device))
    if key not in _PLAIN:
        sched = ag_schedule(1, 0, M, cfg.block_m, 1)
        _PLAIN[key] = (
            sched.blocks.to(a.device),
            torch.zeros(num_flag_slots(1), dtype=torch.int32, device=a.device),
            torch.zeros(8, dtype=torch.int32, device=a.device),
            torch.zeros(MAX_SPLITS + 1, dtype=torch.int32, device=a.device),
        )
    blocks, flags, error, counters = _PLAIN[key]
    if out is None:
        out = a.new_empty((M, weight.shape[0]))
    launch(MODE_AG, a=a, weight=weight, out=out, blocks=blocks, chunk_rows=M, rank=0, world_size=1,
           flags=flags, error=error, epoch=1, timeout_s=1.0, config=cfg, max_splits=MAX_SPLITS,
           bias=bias, counters=counters)
    return out
