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
(bit-stable across runs).

Liveness: tiles are claimed from a counter in the tile table's order, where every peer-chunk tile
comes before every local tile (:meth:`fluxlite.schedule.TileSchedule.tile_order`). So when a program
waits on the peers, every tile they wait for has been claimed by a running program, which does not
wait, even with too few resident programs or under the interpreter (programs run one at a time).
A stored tile is counted after the program's next main loop, by when its stores have landed, but
always before the program waits on anyone. A kernel whose wait timed out still computes and counts
every peer tile, so the producer's stream waits on the counters always end.
"""

import torch
import triton
import triton.language as tl

from ..epilogue import Epilogue
from . import gemm_core as core
from . import launch as direct
from .flags import TIMEOUT_RS, drain_tma_stores, signal_add, wait_peer


@triton.jit
def _publish(counters_ptr, slot, USE_TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """Count a stored peer tile (``slot < 0``: nothing to count) once its stores are in memory."""
    if slot >= 0:
        if USE_TMA:
            drain_tma_stores(INTERPRET)
        signal_add(counters_ptr + slot, 1)


@triton.jit(do_not_specialize=["num_tiles", "chunk_rows", "rank", "world_size", "sig_base",
                               "claim_slot", "timeout_ns"])
def gemm_rs_kernel(
    a_desc,        # a [M, K_local]
    b_desc,        # weight [N, K_local], or weight.T when B_KMAJOR
    out,           # [M/W, N] as [1, M/W, N]
    bias_ptr,      # [N] or unused
    partial,       # [W, M/W, N] this rank's partials of the peers' rows (local)
    recv,          # [W, M/W, N] the peers' partials of this rank's rows (symmetric)
    blocks_ptr,    # int32 [num_blocks, 4]: (chunk, row0, rows, slot), schedule.kernel_blocks: a peer
                   # chunk's counter, or the local chunk's flag slot of peer 0 (peer p: + p * PEER_SLOTS)
    tiles_ptr,     # int32 [num_tiles, 2]: (block, column block) in claim order, schedule.tile_order
    flags_ptr, sig_ptr, counters_ptr, error_ptr,
    call_ptr,      # int32 the device's call count: this call's number, for the error record
    num_tiles, chunk_rows, N, K, rank, world_size, sig_base, claim_slot, timeout_ns,
    scale,         # fp32 scalar epilogue scale, applied to the reduced sum
    PEER_SLOTS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    USE_TMA: tl.constexpr,
    UPCAST: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    out_dtype = out.dtype if USE_TMA else out.dtype.element_ty
    offs_r = tl.arange(0, BLOCK_M)
    pending = tl.full((), -1, tl.int32)  # counter slot of the peer tile stored last, not yet counted
    tile = core.claim_tile(counters_ptr, claim_slot)
    while tile < num_tiles:
        next_tile = core.claim_tile(counters_ptr, claim_slot)
        chunk, row0, rows, slot, j = core.tile_coords(tiles_ptr, blocks_ptr, tile)
        n0 = j * BLOCK_N
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        mask = (offs_r < rows)[:, None] & col_ok[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = core.mainloop(acc, a_desc, b_desc, chunk * chunk_rows + row0, world_size * chunk_rows, j, N, K,
                            BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, False, USE_TMA, UPCAST)
        # Before any wait on the peers: never hold back what they wait for.
        _publish(counters_ptr, pending, USE_TMA, INTERPRET)
        pending = -1
        if chunk != rank:
            core.store_tile(partial, acc.to(out_dtype), chunk, row0, n0, chunk * chunk_rows, offs_r, offs_n, mask,
                            N, BLOCK_M, BLOCK_N, USE_TMA)
            pending = slot
        else:
            for p in range(0, world_size):
                if p != rank:
                    wait_peer(flags_ptr, slot + p * PEER_SLOTS, call_ptr, sig_base, sig_ptr, error_ptr, timeout_ns,
                              TIMEOUT_RS, p, chunk, INTERPRET)
                    if USE_TMA:
                        part = recv.load([p, row0, n0]).reshape(BLOCK_M, BLOCK_N)
                    else:
                        rows64 = (p * chunk_rows + row0 + offs_r).to(tl.int64)
                        part = tl.load(recv + rows64[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
                    acc += part.to(tl.float32)
            acc = core.epilogue(acc, scale, bias_ptr, offs_r, offs_r < rows, bias_ptr, offs_n, col_ok, HAS_BIAS, False, 0,
                                BLOCK_M, BLOCK_N)
            core.store_tile(out, acc.to(out_dtype), 0, row0, n0, 0, offs_r, offs_n, mask, N, BLOCK_M, BLOCK_N,
                            USE_TMA)
        tile = next_tile
    _publish(counters_ptr, pending, USE_TMA, INTERPRET)


def launch(*, a: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None,
           partial: torch.Tensor, recv: torch.Tensor, blocks: torch.Tensor, tiles: torch.Tensor,
           flags: torch.Tensor, sig: torch.Tensor, counters: torch.Tensor, error: torch.Tensor,
           call: torch.Tensor, rank: int, world_size: int, sig_base: int, claim_slot: int, peer_slots: int,
           timeout_s: float, ep: Epilogue, config: core.GemmConfig, cache: dict) -> None:
    """Launch :func:`gemm_rs_kernel`. ``a: [M, K]``, ``weight: [N, K]`` (row-major, or the transpose
    of a row-major ``[K, N]``), ``out: [M/W, N]``, ``partial``/``recv: [W, M/W, N]``; the tables and
    flag arguments come from the call plan, ``cache`` keeps its compiled kernels; ``ep``: the
    epilogue, a scale only (of the reduced sum, before the bias)."""
    M, K = a.shape
    N = weight.shape[0]
    mc = M // world_size
    out3 = out.view(1, mc, N)
    use_tma = core.tma_ok(a, out3, partial, recv, weight if weight.is_contiguous() else weight.t())
    interp = core.interpreting()
    b, b_kmajor = core.weight_operand(weight, config, use_tma)
    tile3 = [1, config.block_m, config.block_n]
    num_tiles = tiles.shape[0]
    direct.launch(
        gemm_rs_kernel, cache, core.num_programs(config, num_tiles, a.device),
        (core.descriptor(a, [config.block_m, config.block_k], use_tma), b, core.descriptor(out3, tile3, use_tma),
         bias if bias is not None else out, core.descriptor(partial, tile3, use_tma),
         core.descriptor(recv, tile3, use_tma), blocks, tiles, flags, sig, counters, error, call,
         num_tiles, mc, N, K, rank, world_size, sig_base, claim_slot, int(timeout_s * 1e9), ep.scale),
        dict(PEER_SLOTS=peer_slots, HAS_BIAS=bias is not None, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
             BLOCK_K=config.block_k, B_KMAJOR=b_kmajor, USE_TMA=use_tma,
             UPCAST=interp and a.dtype == torch.bfloat16, INTERPRET=interp),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
