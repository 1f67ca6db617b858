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
All flags are int32 slots of the symmetric flag array. Call number ``e`` (the epoch) marks a slot
ready by writing ``e``; a waiter waits for ``flag >= e``. Slots are never reset. Each op kind owns
its own slots, and slot numbers do not depend on the split count, so a fast peer already working on
a later call can never satisfy a wait of an earlier one with a different meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

MAX_SPLITS = 16
"""Most splits a chunk is cut into (flag slots are laid out for this many)."""


def num_flag_slots(world_size: int) -> int:
    """Size of the symmetric int32 flag array for a group of ``world_size`` ranks."""
    return world_size + 3 * world_size * MAX_SPLITS


def ag_ready_slot(src: int) -> int:
    """AG: set on rank ``r`` by peer ``src`` once ``src``'s rows sit in its staging buffer."""
    return src


def ag_data_slot(world_size: int, chunk: int, split: int) -> int:
    """AG: set on rank ``r`` by its own producer once (chunk, split) sits in the gathered buffer."""
    return world_size + chunk * MAX_SPLITS + split


def rs_recv_slot(world_size: int, src: int, split: int) -> int:
    """RS: set on rank ``r`` by peer ``src`` once src's partial of r's split ``split`` arrived."""
    return world_size + world_size * MAX_SPLITS + src * MAX_SPLITS + split


def rs_staged_slot(world_size: int, src: int, split: int) -> int:
    """RS, ``pull`` transport: set on rank ``r`` by peer ``src`` once src's partial of r's split
    ``split`` sits in src's symmetric buffer, ready to be pulled."""
    return world_size + 2 * world_size * MAX_SPLITS + src * MAX_SPLITS + split


def rs_counter_slot(dst: int, split: int) -> int:
    """RS: index into the local (non-symmetric) tile counters: tiles done for (dst chunk, split)."""
    return dst * MAX_SPLITS + split


def default_splits(blocks_per_chunk: int, world_size: int) -> int:
    """Splits per chunk: enough that the first copy starts (AG) or leaves (RS) early, few enough
    that each copy stays large. About four row blocks per split, at most ``MAX_SPLITS``."""
    if world_size == 1:
        return 1
    return max(1, min(MAX_SPLITS, blocks_per_chunk // 4))


@dataclass(frozen=True)
class TileSchedule:
    """Which row blocks run in which order, and which (chunk, split) flag each one belongs to.

    ``blocks`` is an int32 tensor ``[num_blocks, 4]`` in run order; its columns are
    ``(chunk, row0, rows, split)``: the block covers rows ``[row0, row0 + rows)`` of ``chunk``.
    """

    op: str
    world_size: int
    rank: int
    chunk_rows: int
    block_m: int
    splits: int
    chunk_order: tuple[int, ...]
    blocks: torch.Tensor

    @property
    def blocks_per_chunk(self) -> int:
        return -(-self.chunk_rows // self.block_m)

    @property
    def num_blocks(self) -> int:
        return int(self.blocks.shape[0])

    def split_blocks(self, split: int) -> range:
        """The row-block indices (within a chunk) that make up ``split``."""
        nb = self.blocks_per_chunk
        return range(split * nb // self.splits, (split + 1) * nb // self.splits)

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


@lru_cache(maxsize=256)
def _build(op: str, world_size: int, rank: int, chunk_rows: int, block_m: int, splits: int | None) -> TileSchedule:
    if op not in ("ag", "rs"):
        raise ValueError(f"op must be 'ag' or 'rs', got {op!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if chunk_rows < 1 or block_m < 1:
        raise ValueError(f"chunk_rows and block_m must be >= 1, got {chunk_rows} and {block_m}")
    nb = -(-chunk_rows // block_m)
    if splits is None:
        splits = default_splits(nb, world_size)
    if not 1 <= splits <= min(MAX_SPLITS, nb):
        raise ValueError(f"splits must be in [1, {min(MAX_SPLITS, nb)}] for {nb} row blocks, got {splits}")
    steps = range(world_size)
    if op == "ag":
        order = tuple((rank + i) % world_size for i in steps)
    else:
        order = tuple((rank + 1 + i) % world_size for i in steps)
    split_of = [0] * nb
    for s in range(splits):
        for b in range(s * nb // splits, (s + 1) * nb // splits):
            split_of[b] = s
    rows = [
        (c, b * block_m, min(block_m, chunk_rows - b * block_m), split_of[b])
        for c in order
        for b in range(nb)
    ]
    blocks = torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 4)
    return TileSchedule(op, world_size, rank, chunk_rows, block_m, splits, order, blocks)


def ag_schedule(world_size: int, rank: int, m: int, block_m: int, splits: int | None = None) -> TileSchedule:
    """Schedule for AG-GEMM: ``m`` rows per rank, local chunk first."""
    return _build("ag", world_size, rank, m, block_m, splits)


def rs_schedule(world_size: int, rank: int, rows_per_rank: int, block_m: int, splits: int | None = None) -> TileSchedule:
    """Schedule for GEMM-RS: ``M / W`` output rows per rank, the chunk for ``r+1`` first, local last."""
    return _build("rs", world_size, rank, rows_per_rank, block_m, splits)
