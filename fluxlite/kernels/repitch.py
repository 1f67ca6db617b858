"""Copy a matrix between row pitches: the padding of operands to whole 16-byte rows, and the crop
of a padded output back to the caller's columns.

Math
----
For ``src: [R, C]`` with row pitch ``s`` (elements from one row's start to the next's) and a
contiguous ``dst: [Rd, Cd]``, both with unit column stride::

    dst[i, j] = src[i, j]   if i < R and j < C
              = 0           otherwise                       (0 <= i < Rd, 0 <= j < Cd)

so ``Rd, Cd >= R, C`` zero-pads (``a: [M, K] -> [M, Kp]``, ``weight: [N, K] -> [Np, Kp]``) and
``Rd, Cd == R, C`` with ``s > C`` crops (``wide[:, :N] -> out: [M, N]``).

Why a kernel of its own: where one side's rows are off 16 bytes (``K`` or ``N`` off a multiple of 8
in bf16, odd or not), torch's strided copy moves every element alone, with a division per element
for its offset. On an H200 it moved 1.5-1.9 TB/s (reads and writes together) at such shapes, against
about 4 TB/s for a contiguous copy; a fused GEMM-RS call with ``K`` and ``N`` off spent a third of
its time in them.

Two ways, by which side is aligned (one program a tile of ``BLOCK_R`` rows):

- ``WORDS`` (a pad: ``dst``'s rows whole 4-byte words, ``src``'s anywhere). ``dst`` moves in aligned
  words of ``E = 32 / bits`` elements; word ``v`` of row ``i`` holds ``src``'s flat elements from
  ``f = i s + v E``, which start ``sh = (i s mod E)`` elements into the aligned word ``w = f // E``
  (``sh`` is the row's). So each word is the funnel shift of two aligned words of ``src``::

      dst_word[i, v] = (word[w] >> sh bits) | (word[w + 1] << (E - sh) bits),   masked to C

  and no load or store is narrower than a word. An element-wise copy with these loads unaligned
  ran slower than torch's.
- Elements (a crop: ``src``'s pitch a whole number of 16-byte units, declared to Triton as the
  pitch in those units, ``SRC_UNIT`` elements each, so that its loads are 16-byte vectors; the
  stores are element-wise, coalesced across the warp).

Every load reads a word that holds an element of ``src``, so nothing past its allocation's aligned
words is read. No shift is by a word's width or more (LLVM makes that poison): the cases it would
take are selected away.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import launch as direct

WORD_TILE = (2, 512)
"""Rows by words of one program's tile on the word path (the best of seven on an H200)."""
ELEMENT_TILE = (64, 128)
"""Rows by elements of one program's tile on the element path."""
NUM_WARPS = 4


@triton.jit(do_not_specialize=["rows", "cols", "src_pitch", "dst_rows", "dst_cols", "col_tiles"])
def repitch_kernel(
    src, dst,
    rows, cols,         # src's extent R x C
    src_pitch,          # src's row pitch in units of SRC_UNIT elements
    dst_rows, dst_cols,  # Rd x Cd; dst is contiguous
    col_tiles,          # tiles of BLOCK_C across a row of dst (words on the word path)
    BITS: tl.constexpr,  # bits per element
    WORDS: tl.constexpr,  # the word path: dst's rows are whole 4-byte words
    SRC_UNIT: tl.constexpr,  # elements per unit of src_pitch
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    pid = tl.program_id(0)
    i = ((pid // col_tiles) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    j = ((pid % col_tiles) * BLOCK_C + tl.arange(0, BLOCK_C))[None, :]
    if WORDS:
        start = i * (src_pitch * SRC_UNIT)  # src's row start, elements
        E: tl.constexpr = 32 // BITS
        c = j * E  # the word's first column
        n = tl.minimum(cols - c, E)  # its elements that lie in src
        take = (i < rows) & (n > 0)
        src_words = src.to(tl.pointer_type(tl.uint32), bitcast=True)
        w = start // E + j
        lo = tl.load(src_words + w, mask=take, other=0)
        if E == 1:  # whole-word elements: never shifted
            word = lo
        else:
            sh = (start % E).to(tl.uint32) * BITS  # the row's shift, bits
            hi = tl.load(src_words + w + 1, mask=take & (sh + n * BITS > 32), other=0)
            word = tl.where(sh == 0, lo, (lo >> sh) | (hi << (32 - sh)))
            ones = tl.full(word.shape, 0xFFFFFFFF, tl.uint32)
            word &= tl.where(n >= E, ones, (ones >> (32 - tl.maximum(n, 1) * BITS).to(tl.uint32)))  # n <= 0: 0 already
        dst_words = dst.to(tl.pointer_type(tl.uint32), bitcast=True)
        tl.store(dst_words + i * (dst_cols // E) + j, word, mask=(i < dst_rows) & (c < dst_cols))
    else:
        element_tile(src, dst, i, j, rows, cols, src_pitch, dst_rows, dst_cols, SRC_UNIT, "")


@triton.jit
def element_tile(src, dst, i, j, rows, cols, src_pitch, dst_rows, dst_cols, SRC_UNIT: tl.constexpr,
                 CACHE: tl.constexpr):
    """The element path's tile (rows ``i: [BR, 1]``, columns ``j: [1, BC]``): ``dst[i, j] = src[i, j]``
    inside ``src``'s ``rows x cols``, 0 elsewhere inside ``dst``'s; ``src``'s pitch is ``src_pitch``
    units of ``SRC_UNIT`` elements, loaded with the cache modifier ``CACHE``. Also the crop of
    GEMM-AllReduce's gathered rows (:mod:`fluxlite.kernels.gather_end`)."""
    # loads of whole units (a mask that is constant across each), up to the unit that holds C:
    # that unit lies inside the row's pitch, past C only where the pitch is
    whole = (j < tl.cdiv(cols, SRC_UNIT) * SRC_UNIT) & (i < rows)
    x = tl.where(j < cols, tl.load(src + i * (src_pitch * SRC_UNIT) + j, mask=whole, other=0, cache_modifier=CACHE), 0)
    tl.store(dst + i * dst_cols + j, x, mask=(i < dst_rows) & (j < dst_cols))


def launch(src: torch.Tensor, dst: torch.Tensor, cache: dict) -> bool:
    """``dst: [Rd, Cd]`` = ``src: [R, C]`` with zeros after (the module's math), on the current
    stream, where it takes them: both 2-D on one CUDA device (or CPU under Triton's interpreter), of
    one dtype of at most 4 bytes, ``src`` no larger than ``dst`` and with unit column stride, ``dst``
    contiguous. Returns whether it launched (where it does not take them it launches nothing, and the
    caller copies another way)."""
    if src.dim() != 2 or dst.dim() != 2 or src.dtype != dst.dtype or not dst.is_contiguous():
        return False
    (R, C), (Rd, Cd), e = src.shape, dst.shape, src.element_size()
    pitch, unit_stride = src.stride()
    if e > 4 or R > Rd or C > Cd or (unit_stride != 1 and C > 1):
        return False
    if not Rd * Cd:
        return True
    pitch = pitch if R > 1 else C
    E, vec = 4 // e, 16 // e
    src_at, dst_at = src.data_ptr(), dst.data_ptr()
    words = Cd % E == 0 and src_at % 4 == 0 and dst_at % 4 == 0
    unit = vec if not words and pitch % vec == 0 and src_at % 16 == 0 else 1
    block_r, block_c = WORD_TILE if words else ELEMENT_TILE
    col_tiles = -(-(Cd // E if words else Cd) // block_c)  # not triton.cdiv: a JIT function, microseconds of host
    direct.launch(repitch_kernel, cache, -(-Rd // block_r) * col_tiles,
                  (src, dst, R, C, pitch // unit, Rd, Cd, col_tiles),
                  dict(BITS=8 * e, WORDS=words, SRC_UNIT=unit, BLOCK_R=block_r, BLOCK_C=block_c),
                  num_warps=NUM_WARPS, num_stages=1)
    return True
