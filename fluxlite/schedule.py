"""The tile protocol: how rows are cut into chunks, splits and row blocks, which flag each block
waits on or signals, and in which order blocks run. Every path (the CPU protocol, the Triton
kernels, the GPU producers) reads the same :class:`TileSchedule`, so a schedule bug shows up in CI.

Terms
-----
- **chunk** ``c``: the rows owned by rank ``c``. AG-GEMM: ``a`` of rank ``c`` (``chunk_rows = m``).
  GEMM-RS: the output rows that rank ``c`` receives (``chunk_rows = M / W``).
- **split** ``s``: a chunk is cut into ``splits`` contiguous pieces of whole row blocks. A split is
  the unit of communication: one copy and one flag per (chunk, split).
- **row block**: ``block_m`` rows of one chunk; the last block of a chunk may be ragged. Blocks
  never straddle chunks, so a flag guards whole blocks.

Order
-----
- AG: the local chunk first (it needs no wait), then ``r+1, r+2, ...``: each rank starts on a
  different peer, so no single link is hot.
- RS: the chunk for ``r+1`` first, then ``r+2``, ..., and the local chunk last, so each
  destination's partials leave as early as possible.

Flags
-----
All flags are int32 slots of the symmetric flag array, in two regions, one per data parity: call
``e`` uses region ``e % 2`` (its *parity*). A flag is *set* (:data:`SET`) by its one writer and
cleared (0) by its owner: at the start of call ``e + 1`` each rank clears its own region of call
``e``, which has ended, so every flag a peer set there has been waited on. A waiter waits for
``flag >= SET``. Because no value depends on the call, a call captured in a CUDA graph replays with
the same flag values (docs/cuda_graphs.md). A peer sets a flag of call ``e + 2`` (the next on that
parity) only after it has seen this rank's signals of call ``e + 1``, which this rank sends after
its clear, so the clear never loses a write. At the start of a call (the same step,
:mod:`fluxlite.kernels.align`) a rank writes its call signature (op, shapes, dtype, options) into
every peer's signature slots of the call's parity, then sets its ``ready`` flag there (AG with
``return_gathered``: its producer sets ``ready`` once its rows are staged); a consumer waits for a
peer's ``ready`` flag and compares the signature with its own before it waits on, or uses, that
peer's data.

Tile order
----------
:meth:`TileSchedule.tile_order` is the order in which the consumer claims (row block, column block)
tiles; the kernels read it as a table and derive no order of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

MAX_SPLITS = 16
"""Most splits a chunk is cut into (flag slots are laid out for this many)."""

SIG_WORDS = 4
"""int32 words of a call signature (see :func:`call_signature`)."""


SET = 1
"""The value of a set flag (a cleared one holds 0)."""


REGION_ALIGN = 64
"""Slots a region is padded to (256 bytes): both parities' regions then start equally aligned, so the
kernels, which take their call's region as a pointer, see one specialisation, not one per parity."""


def region_slots(world_size: int) -> int:
    """Slots of one parity region: ``ready[W]``, ``pushed[W][MAX_SPLITS]``, ``pulled[W][MAX_SPLITS]``,
    ``finished[W]``, ``reduced[W][MAX_SPLITS]``, padded to :data:`REGION_ALIGN`.

    :func:`ready_slot`, :func:`data_slot`, :func:`pulled_slot`, :func:`finished_slot` and
    :func:`reduced_slot` are offsets into a region; the kernels get the region of their call's parity
    as their flag array.
    """
    return -(-(2 * world_size + 3 * world_size * MAX_SPLITS) // REGION_ALIGN) * REGION_ALIGN


def region_start(world_size: int, parity: int) -> int:
    """The first slot of parity ``parity``'s region."""
    return parity * region_slots(world_size)


def num_flag_slots(world_size: int) -> int:
    """Size of the symmetric int32 flag array for a group of ``world_size`` ranks.

    Layout: the regions of parity 0 and 1 (:func:`region_slots`), then
    ``signature[2 parities][W][SIG_WORDS]``. Every slot but the regions' padding has exactly one
    writer (the peer it is indexed by, or for ``pulled`` this rank's own producer); the owner clears
    its region (at the start of its next call).
    """
    return 2 * region_slots(world_size) + 2 * world_size * SIG_WORDS


def ready_slot(src: int) -> int:
    """Region offset of the flag that peer ``src`` sets on rank ``r`` once it has written its call
    signature on ``r`` (and, for AG with ``return_gathered``, staged its rows for ``r`` to pull).
    Every consumer waits for it and checks the signature before it waits on any of ``src``'s data."""
    return src


def data_slot(world_size: int, src: int, split: int) -> int:
    """Region offset of the flag that peer ``src`` sets on rank ``r`` once split ``split`` of its data
    for this call is in r's memory: AG (push): src's rows in the gathered buffer; RS: src's partial
    of r's rows in ``recv``."""
    return world_size + src * MAX_SPLITS + split


def pulled_slot(world_size: int, src: int, split: int) -> int:
    """AG with ``return_gathered``: region offset of the flag that rank ``r``'s own producer sets
    once it pulled split ``split`` of peer ``src``'s staged rows into the gathered tensor."""
    return world_size + world_size * MAX_SPLITS + src * MAX_SPLITS + split


def finished_slot(world_size: int, src: int) -> int:
    """Region offset of the flag that peer ``src`` sets on rank ``r`` once its data for the call may
    be read: the one shot (GEMM-RS's small calls, GEMM-AllReduce's), its whole partial in src's own
    memory (its reduction kernel, :mod:`fluxlite.kernels.one_shot`, after the GEMM)."""
    return world_size + 2 * world_size * MAX_SPLITS + src


def reduced_slot(world_size: int, src: int, split: int) -> int:
    """GEMM-AllReduce (two shots): region offset of the flag that peer ``src``'s producer sets on rank
    ``r`` once split ``split`` of its reduced chunk is in r's ``gathered`` (behind the copy), so that
    r's end (:mod:`fluxlite.kernels.gather_end`) copies it out while later splits travel."""
    return 2 * world_size + 2 * world_size * MAX_SPLITS + src * MAX_SPLITS + split


def signature_slot(world_size: int, parity: int, src: int) -> int:
    """First of the ``SIG_WORDS`` slots (of the whole array) on rank ``r`` where peer ``src`` writes
    the signature of its call of parity ``parity``, before it sets any flag of that call on ``r``."""
    return 2 * region_slots(world_size) + (parity * world_size + src) * SIG_WORDS


def peer_slots() -> int:
    """Distance between the data flags of consecutive source ranks (same split)."""
    return MAX_SPLITS


def split_of_data_slot(world_size: int, slot: int) -> int:
    """The split a data, pulled or reduced flag slot guards (for error messages; 0 for a ready or
    finished slot, which guard whole calls)."""
    if slot >= reduced_slot(world_size, 0, 0):
        return (slot - reduced_slot(world_size, 0, 0)) % MAX_SPLITS
    if slot < world_size or slot >= finished_slot(world_size, 0):
        return 0
    return (slot - data_slot(world_size, 0, 0)) % MAX_SPLITS


def counter_slot(dst: int, split: int) -> int:
    """RS: index into the local (non-symmetric) counters: tiles done for (dst chunk, split)."""
    return dst * MAX_SPLITS + split


def claim_slot(world_size: int) -> int:
    """RS: index into the local counters of the kernel's claim counter, from which its programs take
    runs of tiles in table order (:func:`fluxlite.kernels.gemm_rs.run_tiles`)."""
    return world_size * MAX_SPLITS


def num_counters(world_size: int) -> int:
    """Size of the local int32 counter array (zeroed before every call)."""
    return world_size * MAX_SPLITS + 1


_DTYPE_CODES = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 3, torch.float64: 4}
OP_SIGNATURES: dict[int, tuple[str, tuple[str, ...]]] = {}
"""Op code -> (op name, names of its option bits): what :func:`describe_signature` prints. Each op
adds itself when it is defined (:class:`fluxlite.ops.op.Op`)."""
MAX_OPTIONS = 7  # option bits of a signature's head word (bits 8-14)
MATMUL_BIT = 15  # the head word's bit that says the call's consumer is the matmul one (not the Triton kernel)


def call_signature(code: int, rows: int, K: int, N: int, dtype: torch.dtype, splits: int,
                   options: tuple[bool, ...] = (), matmul: bool = False) -> tuple[int, ...]:
    """The ``SIG_WORDS`` int32 words that identify a fused call:
    ``(op code | dtype | option bits | splits, rows, K, N)``.

    ``code``: the op's (1-15); ``rows``: the op's row count (AG's ``m`` per rank, RS's ``M``).
    Every rank of a call must have the same signature; a waiter compares a peer's with its own
    before it uses the peer's data. ``options`` are what changes the data exchanged (AG: the
    gathered rows pulled or pushed, row scales travelling with the rows), at most
    :data:`MAX_OPTIONS`. ``matmul``: the consumer is the matmul one, whose partials carry the scale
    and the bias (:mod:`fluxlite.ops.gemm_rs`), not the Triton kernel's.
    """
    if not 0 < code < 16 or len(options) > MAX_OPTIONS:
        raise ValueError(f"an op code is 1-15 with at most {MAX_OPTIONS} options, got {code} and {len(options)}")
    bits = sum(int(bool(o)) << i for i, o in enumerate(options))
    return code | _DTYPE_CODES[dtype] << 4 | bits << 8 | int(matmul) << MATMUL_BIT | splits << 16, rows, K, N


def describe_signature(words) -> str:
    """A readable form of :func:`call_signature`'s words, for error messages."""
    head, rows, K, N = (int(w) for w in words)
    if head == 0:
        return "no fused call (no signature written)"
    dtypes = {v: k for k, v in _DTYPE_CODES.items()}
    name, options = OP_SIGNATURES.get(head & 0xF, (f"op code {head & 0xF}", ()))
    dtype = str(dtypes.get(head >> 4 & 0xF, f"dtype code {head >> 4 & 0xF}")).replace("torch.", "")
    what = f"{name}(rows={rows}, K={K}, N={N}, {dtype}"
    for i, option in enumerate(options):
        what += f", {option}={bool(head >> (8 + i) & 1)}"
    if head >> MATMUL_BIT & 1:
        what += ", consumer=matmul"
    return what + f", splits={head >> 16})"


DEFAULT_MAX_SPLITS = 4
"""The most splits :func:`default_splits` gives. Each split is a copy and a flag per peer: two nodes of
a replayed call's graph, about 1 us of launch each. More splits help only where a chunk's copy is
comparable to a chunk's GEMM (small chunks, which get few splits anyway); on 2xH200 the large AG
shapes ran the same with 2 splits as with 8 (BENCHMARKS.md)."""


def default_splits(blocks_per_chunk: int, world_size: int) -> int:
    """Splits per chunk: enough that the first copy starts (AG) or leaves (RS) early, few enough
    that each copy stays large and the producer small. About four row blocks per split, at most
    :data:`DEFAULT_MAX_SPLITS`."""
    if world_size == 1:
        return 1
    return max(1, min(DEFAULT_MAX_SPLITS, blocks_per_chunk // 4))


TAPER = (4, 3, 1)
"""Weights of a tapered chunk's splits: a half, three eighths, an eighth. For a consumer whose last
split's output leaves only after its GEMM (GEMM-AllReduce's second shot), the last split's copy is
what remains after the GEMM; a small last split shortens it, and each split's copy still fits
beside the next, smaller split's GEMM."""


def split_span(split: int, blocks: int, splits: int, tapered: bool = False) -> range:
    """The row blocks (of a chunk's ``blocks``) that ``split`` of ``splits`` covers: whole blocks, as
    even as they allow, the later splits the larger; ``tapered``: ``splits == len(TAPER)`` splits
    cut by the weights :data:`TAPER` (at least ``sum(TAPER)`` blocks). The one place a split's
    bounds are made: the schedule's block table, :meth:`TileSchedule.split_rows` (so the consumers'
    GEMMs and the producer programs) and the tile order all take them from here.

    Even cuts, also where a consumer runs one cuBLAS GEMM per split whose row tile does not divide the
    split: on two H200s, cuts on that tile, or on multiples of 768 rows, made no GEMM-RS call faster
    without making others slower (BENCHMARKS.md, "Variants measured and not kept")."""
    if not tapered:
        return range(split * blocks // splits, (split + 1) * blocks // splits)
    total = sum(TAPER)
    start = sum(TAPER[:split])
    return range(start * blocks // total, (start + TAPER[split]) * blocks // total)


@dataclass(frozen=True)
class TileSchedule:
    """Which row blocks run in which order, and which (chunk, split) flag each one belongs to.

    ``blocks`` is an int32 tensor ``[num_blocks, 4]`` in run order; its columns are
    ``(chunk, row0, rows, split)``: the block covers rows ``[row0, row0 + rows)`` of ``chunk``.
    """

    world_size: int
    rank: int
    chunk_rows: int
    block_m: int
    splits: int
    chunk_order: tuple[int, ...]
    blocks: torch.Tensor
    tapered: bool = False  # splits cut by TAPER (split_span)

    @property
    def blocks_per_chunk(self) -> int:
        return -(-self.chunk_rows // self.block_m)

    @property
    def num_blocks(self) -> int:
        return int(self.blocks.shape[0])

    def split_blocks(self, split: int) -> range:
        """The row-block indices (within a chunk) that make up ``split``."""
        return split_span(split, self.blocks_per_chunk, self.splits, self.tapered)

    def split_rows(self, split: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of a chunk covered by ``split``."""
        b = self.split_blocks(split)
        return b.start * self.block_m, min(b.stop * self.block_m, self.chunk_rows)

    def peers(self) -> tuple[int, ...]:
        """The other ranks, in the order this op talks to them."""
        return tuple(c for c in self.chunk_order if c != self.rank)

    def rows(self):
        """Iterate ``(chunk, row0, rows, split)`` tuples in run order."""
        return (tuple(int(v) for v in row) for row in self.blocks.tolist())

    def kernel_blocks(self, slot: Callable[[int, int], int]) -> torch.Tensor:
        """int32 ``[num_blocks, 4]`` in run order, what the kernels read: ``(chunk, row0, rows, slot)``,
        where ``slot(chunk, split)`` is what the block waits on or counts into (the op's choice among
        :func:`data_slot`, :func:`pulled_slot`, :func:`counter_slot`, or -1 for nothing)."""
        rows = [(chunk, row0, n, slot(chunk, split)) for chunk, row0, n, split in self.rows()]
        return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 4)

    def local_tiles(self, num_n: int) -> int:
        """Tiles of one chunk (this rank's own among them) when each row block has ``num_n``
        column blocks: where the chunk comes in :attr:`chunk_order` is where its tiles are in
        :meth:`tile_order`."""
        return self.blocks_per_chunk * num_n

    def split_tiles(self, split: int, num_n: int) -> int:
        """Tiles of one chunk's ``split`` when each row block has ``num_n`` column blocks."""
        return len(self.split_blocks(split)) * num_n

    def tile_order(self, num_n: int, group_m: int, by_split: bool = False) -> torch.Tensor:
        """The order in which the consumer takes tiles: int32 ``[num_blocks * num_n, 2]`` of
        (row block index into :attr:`blocks`, column block).

        Chunks are taken whole in schedule order, and within a chunk ``group_m`` row blocks at a
        time, column block by column block (so those row blocks share each column block of the
        weight in L2). A group never straddles two chunks. That is a liveness property, not only
        a locality one: GEMM-RS claims its tiles in this order, and the local chunk's tiles (which wait
        for the peers) must come after every tile the peers wait for. A group that mixed the two
        let a program hold a peer tile while it waited for the peers, who waited for that tile.

        ``by_split``: nor does a group straddle two splits, so a chunk's splits finish one after
        the other. For a chunk whose splits must leave as soon as they are computed (GEMM-AllReduce's
        reduced local chunk, whose gather is what remains after the GEMM): a group of all of a
        chunk's row blocks, column by column, would finish every split only at the chunk's end, and
        hold back every copy until then. AG-GEMM's splits arrive before their tiles run, and
        GEMM-RS's peer chunks have the whole local chunk's time to land; both keep the wider groups'
        reuse of the weight.
        """
        return _tile_order(self.world_size, self.blocks_per_chunk, self.splits if by_split else 1, num_n, group_m,
                           self.tapered and by_split)

    def split_groups_keep_reuse(self, num_n: int, group_m: int, programs: int) -> bool:
        """Whether tile groups bounded by splits (``tile_order(by_split=True)``) give the weight as much
        reuse as groups across splits, with ``programs`` tiles running at a time.

        ``programs`` consecutive tiles of the order form one wave. A wave covers
        ``rows(g) = g * max(1, programs // (g * num_n))`` row blocks with groups of ``g`` rows (whole
        groups side by side where a group is less than a wave), and each weight column block it
        loads serves that many row blocks from L2. Split-bounded groups keep the reuse where
        ``rows`` does not drop: a split of 4 row blocks and 16 column blocks runs 2 groups per wave
        of 132, 8 rows as groups of 8 would; at 32 column blocks it runs 4 rows against 8, and GEMM-RS
        measured 4-9% slower for it (2xH200, BENCHMARKS.md)."""
        def rows(g: int) -> int:
            return g * max(1, programs // (g * num_n))

        split = min(len(self.split_blocks(s)) for s in range(self.splits))
        return rows(min(group_m, split)) >= rows(min(group_m, self.blocks_per_chunk))


@lru_cache(maxsize=256)
def build(world_size: int, rank: int, chunk_rows: int, block_m: int, first: int, splits: int | None = None,
          tapered: bool = False) -> TileSchedule:
    """The schedule of rank ``rank`` of ``world_size``: chunks of ``chunk_rows`` rows taken in the order
    ``rank + first, rank + first + 1, ...`` (mod ``world_size``; AG-GEMM's ``first = 0`` starts on the
    local chunk, GEMM-RS's ``1`` ends on it), cut into ``block_m``-row blocks and ``splits`` splits
    (default: :func:`default_splits`)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if chunk_rows < 1 or block_m < 1:
        raise ValueError(f"chunk_rows and block_m must be >= 1, got {chunk_rows} and {block_m}")
    nb = -(-chunk_rows // block_m)
    if tapered:
        if splits not in (None, len(TAPER)) or nb < sum(TAPER):
            raise ValueError(f"a tapered schedule has {len(TAPER)} splits of at least {sum(TAPER)} row blocks, "
                             f"got splits={splits} and {nb} row blocks")
        splits = len(TAPER)
    if splits is None:
        splits = default_splits(nb, world_size)
    if not 1 <= splits <= min(MAX_SPLITS, nb):
        raise ValueError(f"splits must be in [1, {min(MAX_SPLITS, nb)}] for {nb} row blocks, got {splits}")
    order = tuple((rank + first + i) % world_size for i in range(world_size))
    split_of = [0] * nb
    for s in range(splits):
        for b in split_span(s, nb, splits, tapered):
            split_of[b] = s
    rows = [
        (c, b * block_m, min(block_m, chunk_rows - b * block_m), split_of[b])
        for c in order
        for b in range(nb)
    ]
    blocks = torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 4)
    return TileSchedule(world_size, rank, chunk_rows, block_m, splits, order, blocks, tapered)


@lru_cache(maxsize=256)
def _tile_order(chunks: int, blocks_per_chunk: int, splits: int, num_n: int, group_m: int,
                tapered: bool = False) -> torch.Tensor:
    if num_n < 1 or group_m < 1:
        raise ValueError(f"num_n and group_m must be >= 1, got {num_n} and {group_m}")
    order = []
    for c in range(chunks):
        for s in range(splits):  # the split's row blocks, or (splits=1) the whole chunk
            span = split_span(s, blocks_per_chunk, splits, tapered)
            for first in range(span.start, span.stop, group_m):
                size = min(group_m, span.stop - first)
                base = c * blocks_per_chunk + first
                order += [(base + i, j) for j in range(num_n) for i in range(size)]
    return torch.tensor(order, dtype=torch.int32).reshape(len(order), 2)
