"""The GEMM core shared by the fused kernels: tile coordinates, the pipelined main loop, the epilogue
and the tile store. Each fused op (``ag_gemm.py``, ``gemm_rs.py``) adds its waits and signals on top.

Math
----
For a tile (row block ``i`` of the schedule, column block ``j``)::

    acc[r, c] = sum_k A[row(i) + r, k] * B[j*BLOCK_N + c, k]      (B: [N, K], nn.Linear layout; fp32)
    out       = epilogue(acc) = act(scale * row_scale[r] * acc + bias[c]).to(out dtype)   (fluxlite.epilogue)

The grid is persistent (one program per SM). Each op walks its tiles in the order of the schedule's
tile table (:meth:`fluxlite.schedule.TileSchedule.tile_order`) in loops over tiles that hold the K
loop inside. Where no operand load of a loop waits (AG's local chunk, GEMM-RS's runs), the loop is
written ``tl.range(..., flatten=True)`` on the TMA path: there the compiler fuses the two loops into
one software pipeline, so the first K steps of a program's next tile load while the current tile's
last steps and its epilogue run. A pipeline restarted per tile leaves the tensor cores idle for the
refill and the epilogue of every tile: measured on an H100, that cost 2-9% against cuBLAS.

A fused tile loop carries no value from one tile to the next (a ``pending`` reassigned in the body):
Triton 3.6 fuses such a loop so that the carried value takes its new value when the next tile's K
steps begin, and the current tile's epilogue then reads the new value, not the one the source
says. Whatever the epilogue needs of an earlier tile is recomputed from the tile table
(``gemm_rs._stored_before``).

A tile leaves the program in two halves of ``BLOCK_N / 2`` columns (:func:`store_tile`): the store
then stages half the bytes in shared memory, which leaves room for a fourth pipeline stage.

The operands' loads go through TMA descriptors when their rows are 16-byte aligned, else masked
pointer loads: the launcher passes descriptors or pointers, and the kernel reads which from the
argument's type (``isinstance(x, tl.tensor_descriptor)``, fixed when the kernel compiles), as it
does for each output. Each output (and GEMM-RS's partials) is a descriptor or a pointer on its
own, by its own rows' alignment (:func:`store_tile` checks which it got): an output of ``N % 8 != 0``
bf16 columns then costs pointer stores only, while the main loop keeps TMA. ``B_KMAJOR``: the weight is given as ``B.T`` (``[K, N]`` row-major, a backward's ``W.t()``),
read in place. Under the Triton interpreter (:data:`INTERPRET`) bf16 operands are upcast to fp32
before the dot (the interpreter's bf16 arithmetic is broken); GPU code keeps native bf16/fp16.
"""

import os
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
INTERPRET = tl.constexpr(_INTERPRET)
"""Whether kernels run under the Triton interpreter, read once at import: Triton fixes interpret mode
when ``@triton.jit`` runs, so a later change could only make the host disagree with the kernels."""


@triton.jit
def next_claim(counters_ptr, claim_slot):
    """The next claim of a counter shared by all programs of the launch (claims run 0, 1, 2, ...)."""
    return tl.atomic_add(counters_ptr + claim_slot, 1, sem="relaxed", scope="gpu")


@triton.jit
def tile_coords(table, tile):
    """Tile id -> ``(chunk, row0, rows, slot, column block)`` from the schedule's tables ``table``:
    ``(blocks, tiles)``, int32 ``[num_blocks, 4]`` and ``[num_tiles, 2]`` (see the kernels' arguments)."""
    blocks_ptr, tiles_ptr = table[0], table[1]
    i = tl.load(tiles_ptr + 2 * tile)
    j = tl.load(tiles_ptr + 2 * tile + 1)
    chunk = tl.load(blocks_ptr + 4 * i)
    row0 = tl.load(blocks_ptr + 4 * i + 1)
    rows = tl.load(blocks_ptr + 4 * i + 2)
    slot = tl.load(blocks_ptr + 4 * i + 3)
    return chunk, row0, rows, slot, j


@triton.jit
def first_tile(start):
    """This program's first tile id at or after ``start`` when the launch's programs take tile ids
    round robin (program ``p`` takes the ids ``t`` with ``t % programs == p``)."""
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    return start + (pid - start % progs + progs) % progs


@triton.jit
def weight_rows(j, N, BLOCK_N: tl.constexpr, GATED: tl.constexpr):
    """The weight rows feeding the accumulator's ``BLOCK_N`` columns for output column block ``j``,
    and their mask. ``N``: output columns. Gated (SwiGLU), the weight is ``[2*N, K]`` (gate rows,
    then up rows) and an output block is ``BLOCK_N // 2`` wide: accumulator column ``c`` takes gate
    row ``j*BLOCK_N/2 + c`` for the first half, and the matching up row ``+ N`` for the second."""
    c = tl.arange(0, BLOCK_N)
    if GATED:
        col = j * (BLOCK_N // 2) + c % (BLOCK_N // 2)
        rows = col + (c // (BLOCK_N // 2)) * N
    else:
        col = j * BLOCK_N + c
        rows = col
    return rows, col < N


@triton.jit
def mainloop(a_desc, b_desc, a_row, a_row_limit, j, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, B_KMAJOR: tl.constexpr, GATED: tl.constexpr):
    """``A[a_row : a_row + BLOCK_M, :K] @ B[weight_rows(j)].T`` in fp32.

    Given descriptors, they zero-fill out-of-range rows/columns (gated: ``b_desc`` is 3-D over
    the weight as ``[2, N, K]``, so one load brings the gate and up rows together); otherwise
    ``a_desc``/``b_desc`` are plain pointers to contiguous row-major tensors, ``A`` having
    ``a_row_limit`` rows. ``N``: output columns (``B`` has ``N`` rows, or ``2*N`` gated).

    Inside a fused tile loop, the trip count must not change from tile to tile, and the tile loop's
    body may hold no other ``for`` loop (Triton 3.6-3.7 then leave the loops unfused, or fail to
    compile): the kernels write their other loops as ``while`` loops.
    """
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if isinstance(a_desc, tl.tensor_descriptor):
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([a_row, k * BLOCK_K])
            if B_KMAJOR:
                b = b_desc.load([k * BLOCK_K, j * BLOCK_N])
            elif GATED:
                b = b_desc.load([0, j * (BLOCK_N // 2), k * BLOCK_K]).reshape(BLOCK_N, BLOCK_K).T
            else:
                b = b_desc.load([j * BLOCK_N, k * BLOCK_K]).T
            acc = _dot(a, b, acc)
    else:
        offs_m = a_row + tl.arange(0, BLOCK_M)
        offs_w, w_ok = weight_rows(j, N, BLOCK_N, GATED)
        offs_k = tl.arange(0, BLOCK_K)
        m_ok = offs_m < a_row_limit
        a_ptrs = a_desc + offs_m.to(tl.int64)[:, None] * K + offs_k[None, :]
        if B_KMAJOR:
            b_ptrs = b_desc + offs_k.to(tl.int64)[:, None] * N + offs_w[None, :]
            b_step = BLOCK_K * N
        else:
            b_ptrs = b_desc + offs_w.to(tl.int64)[None, :] * K + offs_k[:, None]
            b_step = BLOCK_K
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_ok = (k * BLOCK_K + offs_k) < K
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & w_ok[None, :], other=0.0)
            acc = _dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += b_step
    return acc


@triton.jit
def _dot(a, b, acc):
    if INTERPRET:
        if a.dtype == tl.bfloat16:  # the interpreter's bf16 dot is wrong; its fp32 one is exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
    return tl.dot(a, b, acc)


@triton.jit
def activate(x, ACTIVATION: tl.constexpr):
    """Elementwise activation by code (``fluxlite.epilogue.ACTIVATION_CODES``): 0 none, 1 GELU (erf),
    2 GELU (tanh form, as ``x * sigmoid(2u)``, since ``0.5 * (1 + tanh(u)) == sigmoid(2u)``), 3 SiLU."""
    if ACTIVATION == 1:
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACTIVATION == 2:
        x = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    elif ACTIVATION == 3:
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def epilogue(acc, scale, row_scales, offs_r, row_ok, bias_ptr, offs_w, w_ok, ACTIVATION: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The one epilogue of every fused op (``fluxlite.epilogue``), on the fp32 accumulator, before
    the output cast: ``act(scale * row_scale[r] * acc + bias[w])``. ``row_scales``: a pointer at the
    tile's first row's scale, or ``None``; ``bias_ptr``: ``None`` without a bias; ``offs_w``: the
    weight row of each accumulator column (:func:`weight_rows`). SwiGLU (code 4) pairs accumulator
    columns ``c`` and ``c + BLOCK_N/2`` (gate, up) into ``[BLOCK_M, BLOCK_N // 2]``: ``silu(gate) * up``."""
    acc = acc * scale
    if row_scales is not None:
        acc = acc * tl.load(row_scales + offs_r, mask=row_ok, other=0.0)[:, None]
    if bias_ptr is not None:
        acc += tl.load(bias_ptr + offs_w, mask=w_ok, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == 4:
        gate, up = halves(acc, BLOCK_M, BLOCK_N)
        y = gate * tl.sigmoid(gate) * up
    else:
        y = activate(acc, ACTIVATION)
    return y


@triton.jit
def halves(tile, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``tile[:, :BLOCK_N/2], tile[:, BLOCK_N/2:]``."""
    return tl.split(tl.permute(tl.reshape(tile, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))


@triton.jit
def load_tile(src, chunk, row0, n0, chunk_row_base, offs_r, offs_n, mask, N, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr):
    """src[chunk, row0 : row0 + BLOCK_M, n0 : n0 + BLOCK_N] in fp32, the mirror of :func:`store_tile`
    (the same descriptor or pointer; rows past the chunk read as 0)."""
    if isinstance(src, tl.tensor_descriptor):
        left = src.load([chunk, row0, n0]).reshape(BLOCK_M, BLOCK_N // 2)
        right = src.load([chunk, row0, n0 + BLOCK_N // 2]).reshape(BLOCK_M, BLOCK_N // 2)
        tile = tl.reshape(tl.permute(tl.join(left, right), (0, 2, 1)), (BLOCK_M, BLOCK_N))
    else:
        rows64 = (chunk_row_base + row0 + offs_r).to(tl.int64)
        tile = tl.load(src + rows64[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    return tile.to(tl.float32)


@triton.jit
def store_tile(dst, tile, chunk, row0, n0, chunk_row_base, offs_r, offs_n, mask, N, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """dst[chunk, row0 : row0 + BLOCK_M, n0 : n0 + BLOCK_N] = tile, cast to ``dst``'s element type
    (rows past the chunk are dropped).

    A descriptor ``dst`` (TMA) is 3-D over ``[chunks, chunk_rows, N]`` with ``[1, BLOCK_M, BLOCK_N/2]``
    blocks, which clips the rows at the chunk's end; the tile goes in two halves. A pointer ``dst``
    points at the flat ``[rows, N]`` array and ``chunk_row_base`` is the chunk's first row.
    """
    if isinstance(dst, tl.tensor_descriptor):
        left, right = halves(tile.to(dst.dtype), BLOCK_M, BLOCK_N)
        dst.store([chunk, row0, n0], left.reshape(1, BLOCK_M, BLOCK_N // 2))
        dst.store([chunk, row0, n0 + BLOCK_N // 2], right.reshape(1, BLOCK_M, BLOCK_N // 2))
    else:
        rows64 = (chunk_row_base + row0 + offs_r).to(tl.int64)
        tl.store(dst + rows64[:, None] * N + offs_n[None, :], tile.to(dst.dtype.element_ty), mask=mask)


# ---- host side -----------------------------------------------------------------------------------


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (``TRITON_INTERPRET=1``): :data:`INTERPRET`."""
    return _INTERPRET


@dataclass(frozen=True)
class GemmConfig:
    """Block sizes and launch shape of the fused kernels."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    num_progs: int = 0  # 0: one program per SM (GPU), 2 under the interpreter


INTERPRET_CONFIG = GemmConfig(block_m=32, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=1, num_progs=2)
_DEFAULT_CONFIG = INTERPRET_CONFIG if _INTERPRET else GemmConfig()


def default_config() -> GemmConfig:
    """128x256x64, 8 warps, 3 stages on GPU (0.97-1.06x cuBLAS on an H100: BENCHMARKS.md); tiny blocks under the
    interpreter, whose cost is per program and K step."""
    return _DEFAULT_CONFIG


@lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def column_blocks(n_out: int, config: GemmConfig, gated: bool = False) -> int:
    """Column blocks of an ``n_out``-column output: a gated (SwiGLU) tile yields ``block_n // 2``."""
    width = config.block_n // 2 if gated else config.block_n
    return -(-n_out // width)


def persistent_programs(config: GemmConfig, device: torch.device) -> int:
    """Programs of a persistent launch before the tile count bounds it: ``config.num_progs``, else one
    per SM (one on a CPU device, whose consumer is not a kernel)."""
    return config.num_progs or (sm_count(device) if device.type == "cuda" else 1)


def num_programs(config: GemmConfig, num_tiles: int, device: torch.device) -> int:
    return max(1, min(persistent_programs(config, device), num_tiles))


def tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs 16-byte aligned bases and row strides (``K % 8 == 0`` for a bf16 operand, ``N % 8 == 0``
    for an output)."""
    return all(t.data_ptr() % 16 == 0 and (t.stride(-2) * t.element_size()) % 16 == 0 for t in tensors)


def descriptor(t: torch.Tensor, block: list[int], use_tma: bool):
    """A host-made TMA descriptor over ``t`` with ``block`` tiles, or ``t`` itself for pointer loads."""
    return TensorDescriptor.from_tensor(t, block) if use_tma else t


def weight_operand(weight: torch.Tensor, config: GemmConfig, use_tma: bool, gated: bool = False):
    """``(operand, b_kmajor)``: the weight ``[N, K]`` as the kernel reads it. A transposed weight
    (``W.t()`` of a row-major ``[K, N]``) is read in place, K-major. Gated (SwiGLU: gate rows, then up
    rows; row-major only), TMA reads it as ``[2, N/2, K]`` (see :func:`mainloop`)."""
    b_kmajor = not weight.is_contiguous()
    if gated and b_kmajor:
        raise ValueError("a gated (SwiGLU) weight must be row-major [2*N, K]")
    if gated and use_tma:
        return descriptor(weight.view(2, weight.shape[0] // 2, weight.shape[1]),
                          [2, config.block_n // 2, config.block_k], True), False
    b = weight.t() if b_kmajor else weight
    block = [config.block_k, config.block_n] if b_kmajor else [config.block_n, config.block_k]
    return descriptor(b, block, use_tma), b_kmajor
