"""GEMM-ReduceScatter consumer: a persistent GEMM whose tiles of the peers' rows are stored and
counted for the producer to push, and whose tiles of this rank's rows add the peers' partials.

Math
----
With ``a: [M, K_local]``, ``W`` ranks and ``mc = M / W`` rows per chunk::

    partial[d, row, n] = sum_k a[d*mc + row, k] * B[n, k]            for each peer chunk d
    out[row, n]        = epilogue(sum_k a[r*mc + row, k] * B[n, k] + sum_{p != r} recv[p, row, n])
                       = scale * (...) + bias[n]                        (no row scale or activation)

A tile of peer chunk ``d`` stores its partial (in the input dtype) into the local ``partial[d]`` and
adds one to the ``(d, split)`` counter; the producer's copy engine waits for the full count and
pushes the split into ``d``'s ``recv[r]``, then sets ``d``'s flag. A tile of the local chunk waits
for every peer's ``(peer, split)`` flag and signature, then sums in fp32 in a fixed peer order
(bit-stable across runs). With ``reduced_counters >= 0`` (GEMM-AllReduce's two shots) a stored local
tile is counted too, into counter ``reduced_counters + split``, so that the producer can send each
reduced split on as soon as it is complete; it is counted as soon as its stores have landed, not
after the next main loop as a peer tile is, since the local tiles come last: deferred, most splits'
counts would wait for the GEMM's last wave, and their copies with them.

Liveness
--------
A program claims a *run* at a time from a counter shared by the launch's programs
(:func:`fluxlite.schedule.claim_slot`): up to :data:`RUN_WAVES` tiles, one per wave of the tile
table (``P`` programs, so tiles ``t, t + P, t + 2P, ...``; see :func:`run_tiles`). The peer chunks'
runs are claimed before the local chunk's, and every peer-chunk tile comes before every local tile
in the table (:meth:`fluxlite.schedule.TileSchedule.tile_order`). So when a program waits on the
peers, every tile they wait for is in a run claimed by a running program that does not wait, even
with too few resident programs or under the interpreter (programs run one at a time). A stored peer
tile is counted after the program's next main loop, by when its stores have landed, but always
before the program waits on anyone. A kernel whose wait timed out still computes and counts every
tile, so the producer's stream waits on the counters always end.

Pipeline
--------
Each run's tile loop is fused with its K loop into one software pipeline on the TMA path
(``tl.range(flatten=True)``, as AG-GEMM's local loop): the next tile's first K steps load while
this tile's epilogue runs. In a local run the loads that go ahead of a wait are the operands' only,
never a peer's data. The loops carry nothing from tile to tile (:mod:`fluxlite.kernels.gemm_core`):
the slot a tile counts is read from the tile table. A run is a few tiles, not a program's whole
share, so that the programs, which claim as they finish, stay within a few tiles of one another in
the table's order: the weight's reuse in L2 and the order in which splits complete hold as for one
claim per tile (measured against one claim per tile and against one run per program:
BENCHMARKS.md).

Cost
----
What the kernel adds to the GEMM core, measured kernel-alone on an H200 (BENCHMARKS.md): 5-8% at
K = 4096-7168 and 16% at K = 2048, mostly the local tiles' loads of the peers' partials (each
waited for where it is issued, after the main loop) and the system-scope count of each stored peer
tile.
"""

import torch
import triton
import triton.language as tl

from ..epilogue import Epilogue
from .. import schedule as sch
from . import gemm_core as core
from . import launch as direct
from .device_flags import TIMEOUT_RS, drain_tma_stores, signal_add, sync_args, wait_peer


@triton.jit
def _publish(counters_ptr, slot, partial):
    """Count a stored peer tile (``slot < 0``: nothing to count) once its stores to ``partial`` are in
    memory."""
    if slot >= 0:
        if isinstance(partial, tl.tensor_descriptor):
            drain_tma_stores()
        signal_add(counters_ptr + slot, 1)


RUN_WAVES = tl.constexpr(4)
"""Tiles per claimed run, one per wave of the tile table."""
MAX_STAGES = 3
"""The most pipeline stages the kernel holds in an H100/H200 block's 227 KB of shared memory: its
fused tile loops keep the pipeline's buffers through the epilogue, whose TMA stores and loads of the
partials stage 64 KB beside them (4 stages of 128x256x64 bf16 tiles: 256 KB in all)."""


@triton.jit
def run_tiles(claim, programs, first_tile, tiles):
    """The run of claim ``claim`` among ``tiles`` tiles from ``first_tile``: ``(first, stop)``, its
    tiles being ``first, first + programs, ... < stop``. Claims ``0 .. programs-1`` take the first
    :data:`RUN_WAVES` waves' tiles, one lane each, then the next waves."""
    span = RUN_WAVES * programs
    wave_group = claim // programs
    first = first_tile + wave_group * span + claim % programs
    return first, tl.minimum(first_tile + tiles, first_tile + (wave_group + 1) * span)


@triton.jit
def _peer_run(first, stop, programs, a_desc, b_desc, partial, table, counters_ptr, pending, chunk_rows, a_rows, N, K,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, B_KMAJOR: tl.constexpr):
    """A run of peer tiles into ``partial``, each counted after the next one's main loop
    (``pending``: the counter slot of the tile stored before the run, -1 for none). Returns the slot
    still pending: the run's last tile's, or ``pending`` for an empty run.

    The loop carries no value from tile to tile (see :func:`_stored_before`)."""
    offs_r = tl.arange(0, BLOCK_M)
    for tile in tl.range(first, stop, programs, flatten=isinstance(a_desc, tl.tensor_descriptor)):
        chunk, row0, rows, slot, j = core.tile_coords(table, tile)
        acc = core.mainloop(a_desc, b_desc, chunk * chunk_rows + row0, a_rows, j, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                            B_KMAJOR, False)
        _publish(counters_ptr, _stored_before(table, tile, first, programs, pending), partial)
        offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_r < rows)[:, None] & (offs_n < N)[None, :]
        core.store_tile(partial, acc, chunk, row0, j * BLOCK_N, chunk * chunk_rows, offs_r, offs_n, mask, N, BLOCK_M,
                        BLOCK_N)
    if first < stop:  # the run's last tile
        _, _, _, pending, _ = core.tile_coords(table, stop - 1 - (stop - 1 - first) % programs)
    return pending


@triton.jit
def _stored_before(table, tile, first, programs, pending):
    """The counter slot of the peer tile stored before ``tile`` in a run from ``first``: the run's
    previous tile's, or ``pending`` (the slot left from before the run) for its first tile.

    Read from the table rather than carried from one tile to the next: in a loop fused with its K
    loop (``flatten=True``), Triton 3.6 updates a value carried by the tile loop when the next tile's
    K steps start, so the epilogue would read the new tile's value, not the previous one's (it
    counted each tile before storing it)."""
    slot = pending
    if tile > first:
        _, _, _, slot, _ = core.tile_coords(table, tile - programs)
    return slot


@triton.jit
def _local_run(first, stop, programs, a_desc, b_desc, out, bias_ptr, partial, recv, table, sync, counters_ptr, pending,
               chunk_rows, a_rows, N, K, rank, world_size, sig_base, reduced_counters, timeout_ns, scale,
               PEER_SLOTS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               B_KMAJOR: tl.constexpr):
    """A run of local tiles: each adds the peers' partials of its rows (waiting for each peer's
    flag) and goes to ``out``. ``pending`` is counted before the first wait."""
    offs_r = tl.arange(0, BLOCK_M)
    for tile in tl.range(first, stop, programs, flatten=isinstance(a_desc, tl.tensor_descriptor)):
        chunk, row0, rows, slot, j = core.tile_coords(table, tile)
        acc = core.mainloop(a_desc, b_desc, chunk * chunk_rows + row0, a_rows, j, N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                            B_KMAJOR, False)
        # before any wait: never hold back what the peers wait for (not carried: see _stored_before)
        _publish(counters_ptr, tl.where(tile == first, pending, -1), partial)
        n0 = j * BLOCK_N
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        row_ok = (offs_r < rows) & (chunk * chunk_rows + row0 + offs_r < a_rows)  # out ends with a's rows
        mask = row_ok[:, None] & col_ok[None, :]
        p = 0
        while p < world_size:  # not a for loop: a for loop in its body keeps the tile loop from fusing
            if p != rank:
                wait_peer(sync, slot + p * PEER_SLOTS, sig_base, timeout_ns, TIMEOUT_RS, p, chunk)
                acc += core.load_tile(recv, p, row0, n0, p * chunk_rows, offs_r, offs_n, mask, N, BLOCK_M, BLOCK_N)
            p += 1
        y = core.epilogue(acc, scale, None, offs_r, row_ok, bias_ptr, offs_n, col_ok, 0, BLOCK_M, BLOCK_N)
        core.store_tile(out, y, 0, row0, n0, 0, offs_r, offs_n, mask, N, BLOCK_M, BLOCK_N)
        if reduced_counters >= 0:  # counted at once (its split: slot - W): the second shot waits for it
            _publish(counters_ptr, reduced_counters + slot - world_size, out)
    return tl.where(first < stop, -1, pending)


@triton.jit(do_not_specialize=["peer_tiles", "num_tiles", "chunk_rows", "a_rows", "rank", "world_size", "sig_base",
                               "claim_slot", "reduced_counters", "timeout_ns"])
def gemm_rs_kernel(
    a_desc,        # a [M, K_local]
    b_desc,        # weight [N, K_local], or weight.T when B_KMAJOR
    out,           # [M/W, N] as [1, M/W, N]; or fewer rows, a's (GEMM-AllReduce's last chunk cut short)
    bias_ptr,      # [N] or None
    partial,       # [W, M/W, N] this rank's partials of the peers' rows (local)
    recv,          # [W, M/W, N] the peers' partials of this rank's rows (symmetric)
    table,         # (blocks, tiles): int32 [num_blocks, 4] (chunk, row0, rows, slot), schedule.kernel_blocks:
                   # a peer chunk's counter, or the local chunk's flag slot of peer 0 (peer p: + p * PEER_SLOTS);
                   # int32 [num_tiles, 2] (block, column block), peer chunks' first, schedule.tile_order
    sync,          # (flags, signature, error record, call count): device_flags.sync_args
    counters_ptr,  # int32 local counters, zeroed before the call: per (chunk, split), then the claim
    peer_tiles, num_tiles, chunk_rows,
    a_rows,        # a's rows: W * chunk_rows, or fewer (a last chunk cut short: its rows past a read as 0)
    N, K, rank, world_size, sig_base,
    claim_slot,    # the runs' claim counter (schedule.claim_slot)
    reduced_counters,  # counter of the local chunk's split 0 (split s: + s), or -1: local tiles are not counted
    timeout_ns,
    scale,         # fp32 scalar epilogue scale, applied to the reduced sum
    PEER_SLOTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
):
    programs = tl.num_programs(0)
    local_tiles = num_tiles - peer_tiles
    peer_claims = tl.cdiv(peer_tiles, RUN_WAVES * programs) * programs
    claims = peer_claims + tl.cdiv(local_tiles, RUN_WAVES * programs) * programs
    pending = tl.full((), -1, tl.int32)  # counter slot of the peer tile stored last, not yet counted
    claim = core.next_claim(counters_ptr, claim_slot)
    while claim < peer_claims:
        first, stop = run_tiles(claim, programs, 0, peer_tiles)
        pending = _peer_run(first, stop, programs, a_desc, b_desc, partial, table, counters_ptr, pending, chunk_rows,
                            a_rows, N, K, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR)
        claim = core.next_claim(counters_ptr, claim_slot)
    while claim < claims:
        first, stop = run_tiles(claim - peer_claims, programs, peer_tiles, local_tiles)
        pending = _local_run(first, stop, programs, a_desc, b_desc, out, bias_ptr, partial, recv, table, sync,
                             counters_ptr, pending, chunk_rows, a_rows, N, K, rank, world_size, sig_base,
                             reduced_counters, timeout_ns, scale, PEER_SLOTS, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR)
        claim = core.next_claim(counters_ptr, claim_slot)
    _publish(counters_ptr, pending, partial)


def check_config(config: core.GemmConfig | None) -> None:
    """Refuse, before any launch, a config whose pipeline the kernel cannot hold (:data:`MAX_STAGES`);
    ``None`` (the default config) passes."""
    if config is not None and config.num_stages > MAX_STAGES:
        raise ValueError(f"config: the GEMM-RS kernel holds at most {MAX_STAGES} pipeline stages, got "
                         f"num_stages={config.num_stages}")


def launch(*, a: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None,
           partial: torch.Tensor, recv: torch.Tensor, blocks: torch.Tensor, tiles: torch.Tensor, peer_tiles: int,
           flags: torch.Tensor, sig: torch.Tensor, counters: torch.Tensor, error: torch.Tensor,
           call: torch.Tensor, rank: int, world_size: int, sig_base: int, timeout_s: float, ep: Epilogue,
           config: core.GemmConfig, cache: dict, reduced_counters: int = -1) -> None:
    """Launch :func:`gemm_rs_kernel`. ``a: [M, K]``, ``weight: [N, K]`` (row-major, or the transpose
    of a row-major ``[K, N]``), ``partial``/``recv: [W, mc, N]`` with ``mc`` rows per chunk (``M / W``,
    or ``ceil(M / W)`` when the last chunk is cut short), ``out: [mc, N]``, or the rows of a chunk cut
    short (those of ``a``); ``peer_tiles``:
    the tile table's leading tiles of the peers' chunks; the tables and flag arguments come from the
    call plan, ``cache`` keeps its compiled kernels; ``ep``: the epilogue, a scale only (of the
    reduced sum, before the bias); ``reduced_counters``: where the local chunk's stored tiles are
    counted per split (-1: not counted)."""
    check_config(config)
    M, K = a.shape
    N = weight.shape[0]
    mc = partial.shape[1]
    out3 = out.view(1, out.shape[0], N)
    use_tma = core.tma_ok(a, weight if weight.is_contiguous() else weight.t())
    rows_tma = core.tma_ok(out3, partial, recv) and out.shape[0] > 0  # the N-wide rows: out, and the partials
    b, b_kmajor = core.weight_operand(weight, config, use_tma)
    half = [1, config.block_m, config.block_n // 2]
    num_tiles = tiles.shape[0]
    direct.launch(
        gemm_rs_kernel, cache, core.num_programs(config, num_tiles, a.device),
        (core.descriptor(a, [config.block_m, config.block_k], use_tma), b, core.descriptor(out3, half, rows_tma),
         bias, core.descriptor(partial, half, rows_tma), core.descriptor(recv, half, rows_tma), (blocks, tiles),
         sync_args(flags, sig, error, call), counters, peer_tiles, num_tiles, mc, M, N, K, rank, world_size, sig_base,
         sch.claim_slot(world_size), reduced_counters, int(timeout_s * 1e9), ep.scale),
        dict(PEER_SLOTS=sch.peer_slots(), BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
             B_KMAJOR=b_kmajor),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
