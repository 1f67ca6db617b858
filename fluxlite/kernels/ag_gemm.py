"""AllGather-GEMM consumer: a persistent GEMM over the gathered rows that waits, per row block, for
the peer's rows it needs.

Math
----
``out[c*m + row, n] = epilogue(sum_k A_c[row, k] * B[n, k])`` for every chunk ``c`` (rank ``c``'s
``m`` rows), where ``A_r`` is this rank's ``a: [m, K]``, read in place with no wait, and ``A_c`` for a
peer ``c`` is rows ``[c*m, (c+1)*m)`` of ``gathered: [W*m, K]``, which the producer fills split by
split. A row block of a peer's chunk first waits until its ``(chunk, split)`` flag is set and the peer's call signature matches ours (:func:`~fluxlite.kernels.flags.wait_peer`).
With ``world_size == 1`` nothing waits: a plain GEMM.

The local chunk comes first in the tile table, so the GEMM starts at once while the peers' rows
arrive. The local rows and the peers' go through one main loop over one descriptor variable,
remade on the device only when the source changes (about twice per program): a second loop over a
second descriptor would need a second set of pipeline buffers, more shared memory than an SM has.
"""

import torch
import triton
import triton.language as tl

from ..epilogue import PLAIN, Epilogue
from . import gemm_core as core
from . import launch as direct
from .flags import TIMEOUT_AG, wait_peer


# Values that change from call to call must not be specialised on (Triton specialises ints equal to
# 1 and divisible by 16), or each new row count would compile a new kernel.
@triton.jit(do_not_specialize=["num_tiles", "chunk_rows", "rank", "world_size", "sig_base",
                               "claim_slot", "timeout_ns"])
def ag_gemm_kernel(
    a_local,       # [m, K] this rank's rows (pointer)
    gathered,      # [W*m, K] the peers' rows land here (pointer)
    b_desc,        # weight [N, K] ([2N, K] gated), or weight.T [K, N] when B_KMAJOR
    out,           # [W*m, N] as [W, m, N] (TMA descriptor or pointer)
    bias_ptr,      # [N] ([2N] gated) or unused
    scale_local,   # fp32 [m] this rank's row scales, or unused
    scale_gathered,  # fp32 [W*m] the peers' row scales land here, or unused
    blocks_ptr,    # int32 [num_blocks, 4]: (chunk, row0, rows, flag slot or -1), schedule.kernel_blocks
    tiles_ptr,     # int32 [num_tiles, 2]: (block, column block) in claim order, schedule.tile_order
    flags_ptr,     # int32 this rank's flag region of the call's parity (symmetric; signatures at sig_base)
    sig_ptr,       # int32 [SIG_WORDS] this call's signature
    counters_ptr,  # int32 local counters, zeroed before the call (the tile claim counter among them)
    error_ptr,     # int32 error record
    call_ptr,      # int32 the device's call count: this call's number, for the error record
    num_tiles, chunk_rows, N, K, rank, world_size, sig_base, claim_slot, timeout_ns,
    scale,         # fp32 scalar epilogue scale
    HAS_BIAS: tl.constexpr,
    ROW_SCALED: tl.constexpr,
    ACTIVATION: tl.constexpr,  # fluxlite.epilogue.ACTIVATION_CODES; 4 (SwiGLU) reads a gated weight
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    B_KMAJOR: tl.constexpr,
    USE_TMA: tl.constexpr,
    UPCAST: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    GATED: tl.constexpr = ACTIVATION == 4
    OUT_N: tl.constexpr = BLOCK_N // 2 if GATED else BLOCK_N  # output columns per tile
    out_dtype = out.dtype if USE_TMA else out.dtype.element_ty
    offs_r = tl.arange(0, BLOCK_M)
    ready_slot = tl.full((), -1, tl.int32)  # last flag slot this program saw ready: no re-polling
    if USE_TMA:
        src = tl.make_tensor_descriptor(a_local, shape=[chunk_rows, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        src_is_local = tl.full((), 1, tl.int32)
    tile = core.claim_tile(counters_ptr, claim_slot)
    while tile < num_tiles:
        next_tile = core.claim_tile(counters_ptr, claim_slot)  # its latency hides behind this tile
        chunk, row0, rows, slot, j = core.tile_coords(tiles_ptr, blocks_ptr, tile)
        offs_n = j * OUT_N + tl.arange(0, OUT_N)
        row_ok = offs_r < rows
        mask = row_ok[:, None] & (offs_n < N)[None, :]
        if slot >= 0:
            if slot != ready_slot:
                err = wait_peer(flags_ptr, slot, call_ptr, sig_base, sig_ptr, error_ptr, timeout_ns, TIMEOUT_AG,
                                chunk, chunk, INTERPRET)
                if err == 0:
                    ready_slot = slot
                else:
                    # The pull producer's stream waits on the peers' ready flags (the first W slots,
                    # schedule.ready_slot), which a missing peer never sets: release them so the
                    # stream drains and the host can raise instead of hanging.
                    for p in range(0, world_size):
                        tl.atomic_max(flags_ptr + p, 1, sem="relaxed", scope="sys")
        is_local = (chunk == rank).to(tl.int32)
        a_row = chunk * chunk_rows + row0
        a_rows = world_size * chunk_rows
        row_scales = scale_gathered + a_row
        if is_local == 1:
            a_row = row0
            a_rows = chunk_rows
            row_scales = scale_local + row0
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if USE_TMA:
            if is_local != src_is_local:
                if is_local == 1:
                    src = tl.make_tensor_descriptor(a_local, shape=[chunk_rows, K], strides=[K, 1],
                                                    block_shape=[BLOCK_M, BLOCK_K])
                else:
                    src = tl.make_tensor_descriptor(gathered, shape=[world_size * chunk_rows, K], strides=[K, 1],
                                                    block_shape=[BLOCK_M, BLOCK_K])
                src_is_local = is_local
            acc = core.mainloop(acc, src, b_desc, a_row, a_rows, j, N, K, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR,
                                GATED, USE_TMA, UPCAST)
        else:
            base = gathered
            if is_local == 1:
                base = a_local
            acc = core.mainloop(acc, base, b_desc, a_row, a_rows, j, N, K, BLOCK_M, BLOCK_N, BLOCK_K, B_KMAJOR,
                                GATED, USE_TMA, UPCAST)
        offs_w, w_ok = core.weight_rows(j, N, BLOCK_N, GATED)
        y = core.epilogue(acc, scale, row_scales, offs_r, row_ok, bias_ptr, offs_w, w_ok, HAS_BIAS, ROW_SCALED,
                          ACTIVATION, BLOCK_M, BLOCK_N)
        core.store_tile(out, y.to(out_dtype), chunk, row0, j * OUT_N, chunk * chunk_rows, offs_r, offs_n, mask, N,
                        BLOCK_M, OUT_N, USE_TMA)
        tile = next_tile


def launch(*, a_local: torch.Tensor, gathered: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
           bias: torch.Tensor | None, ep: Epilogue, scale_local: torch.Tensor | None,
           scale_gathered: torch.Tensor | None, blocks: torch.Tensor, tiles: torch.Tensor, flags: torch.Tensor,
           sig: torch.Tensor, counters: torch.Tensor, error: torch.Tensor, call: torch.Tensor, rank: int,
           world_size: int, sig_base: int, claim_slot: int, timeout_s: float, config: core.GemmConfig,
           cache: dict) -> None:
    """Launch :func:`ag_gemm_kernel`. ``a_local: [m, K]``, ``gathered: [W*m, K]``, ``weight: [N, K]``
    (row-major, or the transpose of a row-major ``[K, N]``; ``[2N, K]`` row-major for SwiGLU),
    ``out: [W*m, N]``; ``ep`` the epilogue (``scale_local: [m]`` and ``scale_gathered: [W*m]`` fp32
    when ``ep.row_scaled``); the tables and flag arguments come from the call plan (see the kernel's
    argument comments), ``cache`` keeps its compiled kernels (:mod:`fluxlite.kernels.launch`)."""
    m, K = a_local.shape
    N = out.shape[1]
    out3 = out.view(world_size, m, N)
    use_tma = core.tma_ok(a_local, gathered, out3, weight if weight.is_contiguous() else weight.t())
    interp = core.interpreting()
    if use_tma and not interp:
        core.ensure_device_descriptor_allocator()
    b, b_kmajor = core.weight_operand(weight, config, use_tma, gated=ep.gated)
    out_n = config.block_n // 2 if ep.gated else config.block_n
    num_tiles = tiles.shape[0]
    direct.launch(
        ag_gemm_kernel, cache, core.num_programs(config, num_tiles, a_local.device),
        (a_local, gathered, b, core.descriptor(out3, [1, config.block_m, out_n], use_tma),
         bias if bias is not None else out, scale_local if ep.row_scaled else out,
         scale_gathered if ep.row_scaled else out, blocks, tiles, flags, sig, counters, error, call,
         num_tiles, m, N, K, rank, world_size, sig_base, claim_slot, int(timeout_s * 1e9), ep.scale),
        dict(HAS_BIAS=bias is not None, ROW_SCALED=ep.row_scaled, ACTIVATION=ep.code, BLOCK_M=config.block_m,
             BLOCK_N=config.block_n, BLOCK_K=config.block_k, B_KMAJOR=b_kmajor, USE_TMA=use_tma,
             UPCAST=interp and a_local.dtype == torch.bfloat16, INTERPRET=interp),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )


_PLAIN: dict[tuple, tuple[torch.Tensor, ...]] = {}
_COMPILED: dict = {}


def gemm(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, ep: Epilogue = PLAIN,
         row_scale: torch.Tensor | None = None, config: core.GemmConfig | None = None,
         out: torch.Tensor | None = None) -> torch.Tensor:
    """The same kernel as a plain GEMM, with no communication: ``epilogue(a [M, K] @ weight[N, K].T)``
    (``row_scale: [M]`` fp32 when ``ep.row_scaled``; ``[M, N/2]`` out for SwiGLU).

    A one-rank AG schedule, where nothing waits. Measures the GEMM alone and checks the core.
    """
    from ..schedule import SIG_WORDS, ag_schedule, claim_slot, num_counters, num_flag_slots

    cfg = config or core.default_config()
    M, N = a.shape[0], ep.out_features(weight.shape[0])
    num_n = core.column_blocks(N, cfg, ep.gated)
    key = (M, num_n, cfg, str(a.device))
    if key not in _PLAIN:
        sched = ag_schedule(1, 0, M, cfg.block_m, 1)
        dev = a.device
        _PLAIN[key] = (sched.kernel_blocks().to(dev), sched.tile_order(num_n, cfg.group_m).to(dev),
                       torch.zeros(num_flag_slots(1), dtype=torch.int32, device=dev),
                       torch.zeros(SIG_WORDS, dtype=torch.int32, device=dev),
                       torch.zeros(16, dtype=torch.int32, device=dev),
                       torch.zeros(num_counters(1), dtype=torch.int32, device=dev),
                       torch.ones(1, dtype=torch.int32, device=dev))
    blocks, tiles, flags, sig, error, counters, call = _PLAIN[key]
    if out is None:
        out = a.new_empty((M, N))
    counters.zero_()
    launch(a_local=a, gathered=a, weight=weight, out=out, bias=bias, ep=ep, scale_local=row_scale,
           scale_gathered=row_scale, blocks=blocks, tiles=tiles, flags=flags, sig=sig, counters=counters,
           error=error, call=call, rank=0, world_size=1, sig_base=0, claim_slot=claim_slot(1), timeout_s=1.0,
           config=cfg, cache=_COMPILED)
    return out
