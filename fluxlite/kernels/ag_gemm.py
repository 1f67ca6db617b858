"""AllGather-GEMM consumer: a persistent GEMM over the gathered rows that waits, per row block, for
the peer's rows it needs.

Math
----
``out[c*m + row, n] = epilogue(sum_k A_c[row, k] * B[n, k])`` for every chunk ``c`` (rank ``c``'s
``m`` rows), where ``A_r`` is this rank's ``a: [m, K]``, read in place with no wait, and ``A_c`` for a
peer ``c`` is rows ``[c*m, (c+1)*m)`` of ``gathered: [W*m, K]``, which the producer fills split by
split. A row block of a peer's chunk first waits until its ``(chunk, split)`` flag is set and the
peer's call signature matches ours (:func:`~fluxlite.kernels.device_flags.wait_peer`). With
``world_size == 1`` nothing waits: a plain GEMM.

The local chunk's tiles come first in the tile table, so the GEMM starts at once while the peers'
rows arrive. The programs take tiles round robin, in two loops: the local chunk's (read from ``a``)
and then the peers' (read from ``gathered``). The local loop, which never waits, is fused with its K
loop into one pipeline (:mod:`~fluxlite.kernels.gemm_core`). The peers' loop keeps one K pipeline
per tile, with the wait before it, so no load of a tile is in flight while the program spins on the
next one's flag; each peer tile pays a pipeline refill for it (measured: BENCHMARKS.md).

Liveness: every wait is for data that a copy engine writes (the producer, or the peers' producers),
never for work of another program, so a program that is not resident (SMs busy with other work)
delays only its own tiles, and the round-robin assignment cannot deadlock.
"""

import torch
import triton
import triton.language as tl

from ..epilogue import PLAIN, Epilogue
from ..process import PROCESS
from . import gemm_core as core
from . import launch as direct
from .device_flags import TIMEOUT_AG, release_flags, sync_args, wait_peer


@triton.jit
def _tiles(a_src, b_desc, out, bias_ptr, row_scales, table, sync, start, stop, chunk_rows, a_rows, N, K, world_size,
           sig_base, timeout_ns, scale,
           ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           B_KMAJOR: tl.constexpr, PEERS: tl.constexpr):
    """This program's tiles of ``[start, stop)`` (round robin), A rows from ``a_src`` (``a_rows``
    rows). ``PEERS``: the peers' chunks, whose rows sit at ``chunk * chunk_rows`` of ``a_src`` (the
    gathered buffer) behind their flags; else the local chunk, read in place from row 0."""
    GATED: tl.constexpr = ACTIVATION == 4
    OUT_N: tl.constexpr = BLOCK_N // 2 if GATED else BLOCK_N  # output columns per tile
    offs_r = tl.arange(0, BLOCK_M)
    ready_slot = tl.full((), -1, tl.int32)  # last flag slot this program saw ready: no re-polling
    for tile in tl.range(core.first_tile(start), stop, tl.num_programs(0), flatten=isinstance(a_src, tl.tensor_descriptor) and not PEERS):
        chunk, row0, rows, slot, j = core.tile_coords(table, tile)
        a_row = row0
        if PEERS:
            a_row = chunk * chunk_rows + row0
            if slot != ready_slot:
                err = wait_peer(sync, slot, sig_base, timeout_ns, TIMEOUT_AG, chunk, chunk)
                if err == 0:
                    ready_slot = slot
                else:
                    release_flags(sync[0], 0, world_size)  # the pull producer's waits: ready, slots 0..W-1
        acc = core.mainloop(a_src, b_desc, a_row, a_rows, j, N, K, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, GATED)
        offs_w, w_ok = core.weight_rows(j, N, BLOCK_N, GATED)
        row_ok = offs_r < rows
        scales = row_scales
        if row_scales is not None:
            scales = row_scales + a_row
        y = core.epilogue(acc, scale, scales, offs_r, row_ok, bias_ptr, offs_w, w_ok, ACTIVATION, BLOCK_M, BLOCK_N)
        offs_n = j * OUT_N + tl.arange(0, OUT_N)
        core.store_tile(out, y, chunk, row0, j * OUT_N, chunk * chunk_rows, offs_r, offs_n,
                        row_ok[:, None] & (offs_n < N)[None, :], N, BLOCK_M, OUT_N)


# Values that change from call to call must not be specialised on (Triton specialises ints equal to
# 1 and divisible by 16), or each new row count would compile a new kernel.
@triton.jit(do_not_specialize=["num_tiles", "local_tiles", "chunk_rows", "world_size", "sig_base", "timeout_ns"])
def ag_gemm_kernel(
    a_local,       # [m, K] this rank's rows (TMA descriptor or pointer)
    gathered,      # [W*m, K] the peers' rows land here (TMA descriptor or pointer)
    b_desc,        # weight [N, K] ([2N, K] gated), or weight.T [K, N] when B_KMAJOR
    out,           # [W*m, N] as [W, m, N] (TMA descriptor, or pointer where N's rows are unaligned)
    bias_ptr,      # [N] ([2N] gated) or None
    scale_local,   # fp32 [m] this rank's row scales, or None
    scale_gathered,  # fp32 [W*m] the peers' row scales land here, or None
    table,         # (blocks, tiles): int32 [num_blocks, 4] (chunk, row0, rows, flag slot or -1),
                   # schedule.kernel_blocks; int32 [num_tiles, 2] (block, column block), the local chunk's
                   # first, schedule.tile_order
    sync,          # (flags, signature, error record, call count): device_flags.sync_args; the flags are
                   # this rank's region of the call's parity (symmetric; signatures at sig_base)
    num_tiles, local_tiles, chunk_rows, N, K, world_size, sig_base, timeout_ns,
    scale,         # fp32 scalar epilogue scale
    ACTIVATION: tl.constexpr,  # fluxlite.epilogue.ACTIVATION_CODES; 4 (SwiGLU) reads a gated weight
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
):
    _tiles(a_local, b_desc, out, bias_ptr, scale_local, table, sync, 0, local_tiles, chunk_rows, chunk_rows, N, K,
           world_size, sig_base, timeout_ns, scale, ACTIVATION, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR, False)
    _tiles(gathered, b_desc, out, bias_ptr, scale_gathered, table, sync, local_tiles, num_tiles, chunk_rows,
           world_size * chunk_rows, N, K, world_size, sig_base, timeout_ns, scale, ACTIVATION, BLOCK_M, BLOCK_N,
           BLOCK_K, B_KMAJOR, True)


def launch(*, a_local: torch.Tensor, gathered: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
           bias: torch.Tensor | None, ep: Epilogue, scale_local: torch.Tensor | None,
           scale_gathered: torch.Tensor | None, blocks: torch.Tensor, tiles: torch.Tensor, local_tiles: int,
           flags: torch.Tensor, sig: torch.Tensor, error: torch.Tensor, call: torch.Tensor, world_size: int,
           sig_base: int, timeout_s: float, config: core.GemmConfig, cache: dict) -> None:
    """Launch :func:`ag_gemm_kernel`. ``a_local: [m, K]``, ``gathered: [W*m, K]``, ``weight: [N, K]``
    (row-major, or the transpose of a row-major ``[K, N]``; ``[2N, K]`` row-major for SwiGLU),
    ``out: [W*m, N]``; ``ep`` the epilogue (``scale_local: [m]`` and ``scale_gathered: [W*m]`` fp32
    when ``ep.row_scaled``); ``local_tiles``: the tile table's leading tiles of this rank's chunk; the
    tables and flag arguments come from the call plan (see the kernel's argument comments),
    ``cache`` keeps its compiled kernels (:mod:`fluxlite.kernels.launch`)."""
    m, K = a_local.shape
    N = out.shape[1]
    out3 = out.view(world_size, m, N)
    use_tma = core.tma_ok(a_local, gathered, weight if weight.is_contiguous() else weight.t())
    b, b_kmajor = core.weight_operand(weight, config, use_tma, gated=ep.gated)
    out_n = config.block_n // 2 if ep.gated else config.block_n
    a_block = [config.block_m, config.block_k]
    num_tiles = tiles.shape[0]
    direct.launch(
        ag_gemm_kernel, cache, core.num_programs(config, num_tiles, a_local.device),
        (core.descriptor(a_local, a_block, use_tma), core.descriptor(gathered, a_block, use_tma), b,
         core.descriptor(out3, [1, config.block_m, out_n // 2], core.tma_ok(out3)), bias,
         scale_local if ep.row_scaled else None, scale_gathered if ep.row_scaled else None, (blocks, tiles),
         sync_args(flags, sig, error, call), num_tiles, local_tiles, m, N, K, world_size, sig_base,
         int(timeout_s * 1e9), ep.scale),
        dict(ACTIVATION=ep.code, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
             B_KMAJOR=b_kmajor),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )


def gemm(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, ep: Epilogue = PLAIN,
         row_scale: torch.Tensor | None = None, config: core.GemmConfig | None = None,
         out: torch.Tensor | None = None) -> torch.Tensor:
    """The same kernel as a plain GEMM, with no communication: ``epilogue(a [M, K] @ weight[N, K].T)``
    (``row_scale: [M]`` fp32 when ``ep.row_scaled``; ``[M, N/2]`` out for SwiGLU).

    A one-rank AG schedule, where nothing waits. Measures the GEMM alone and checks the core.
    """
    from ..schedule import SIG_WORDS, build, num_flag_slots

    cfg = config or core.default_config()
    M, N = a.shape[0], ep.out_features(weight.shape[0])
    num_n = core.column_blocks(N, cfg, ep.gated)
    cache = PROCESS.plain_gemm  # (M, column blocks, config, device) -> tables; "kernels": compiled kernels
    key = (M, num_n, cfg, str(a.device))
    if key not in cache:
        sched = build(1, 0, M, cfg.block_m, 0, 1)
        dev = a.device
        cache[key] = (sched.kernel_blocks(lambda chunk, split: -1).to(dev), sched.tile_order(num_n, cfg.group_m).to(dev),
                       torch.zeros(num_flag_slots(1), dtype=torch.int32, device=dev),
                       torch.zeros(SIG_WORDS, dtype=torch.int32, device=dev),
                       torch.zeros(16, dtype=torch.int32, device=dev),
                       torch.ones(1, dtype=torch.int32, device=dev))
    blocks, tiles, flags, sig, error, call = cache[key]
    if out is None:
        out = a.new_empty((M, N))
    launch(a_local=a, gathered=a, weight=weight, out=out, bias=bias, ep=ep, scale_local=row_scale,
           scale_gathered=row_scale, blocks=blocks, tiles=tiles, local_tiles=tiles.shape[0], flags=flags, sig=sig,
           error=error, call=call, world_size=1, sig_base=0, timeout_s=1.0, config=cfg, cache=cache.setdefault("kernels", {}))
    return out
