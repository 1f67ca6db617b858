"""Experiment (not in the package): GEMM-RS matmul consumer's two splits per chunk with their boundary
on a multiple of ALIGN_BLOCKS row blocks (the matmul consumer's blocks are 64 rows: 12 blocks = 768
rows, a multiple of 128-, 192- and 256-row GEMM tiles), nearest the middle. Patched into
fluxlite.schedule.split_span, which the block table, split_rows and the tile order all use."""
import os
import fluxlite.schedule as sch

_orig = sch.split_span
Q = int(os.environ.get("ALIGN_BLOCKS", "12"))


def aligned(split: int, blocks: int, splits: int) -> range:
    if splits != 2 or blocks < 2 * Q:
        return _orig(split, blocks, splits)
    b = max(1, min(blocks - 1, round(blocks / 2 / Q) * Q))
    return range(0, b) if split == 0 else range(b, blocks)


def install() -> None:
    sch.split_span = aligned
    sch.build.cache_clear()
