"""Which of cuBLASLt's heuristic candidates a matmul consumer's GEMM takes
(``fluxlite._cublaslt.preferred``), from the candidates' tiles in the heuristic's order: the second
only where the first two are the 256x128 tile and then the 128x256 one; the first otherwise,
including where a tile could not be read (``None``) or there is one candidate. Pure Python: the
GPU side (``tests/test_gpu_cublaslt.py``) checks that a plan follows it."""

from __future__ import annotations

import pytest

from fluxlite import _cublaslt as lt

T128x256, T256x128 = 23, 24  # cublasLtMatmulTile_t, as cublasLt.h numbers them


@pytest.mark.parametrize(
    "tiles, want",
    [
        ([T256x128, T128x256], 1),
        ([T256x128, T128x256, 20], 1),
        ([T128x256, T256x128], 0),  # the other order: the heuristic's first
        ([T256x128], 0),  # one candidate
        ([], 0),
        ([T256x128, None], 0),  # a tile this cuBLASLt could not report
        ([None, T128x256], 0),
        ([216, 244], 0),  # other pairs: measured both ways, so the heuristic's first
        ([248, 29], 0),
        ([186, 240], 0),
    ],
)
def test_preferred_takes_the_second_only_for_the_256x128_then_128x256_pair(tiles, want):
    assert lt.preferred(tiles) == want


def test_the_tile_numbers_are_cublaslts():
    assert (lt._TILE_128x256, lt._TILE_256x128) == (T128x256, T256x128)
