"""The copy between row pitches (``fluxlite.kernels.repitch``), under Triton's interpreter on CPU and
compiled on a GPU: every dtype it takes, pads (the word path, rows off a word) and crops (the element
path, 16-byte loads), sources that are views of larger rows, against the tensor it must equal
element for element, into a poisoned ``dst``; on a GPU also at the sizes of a fused call's operands,
and through the two functions that use it (``fluxlite._sequential.zero_padded`` and
``first_columns``).

Its speed against torch's copies is in BENCHMARKS.md; here what is checked is that every element
lands where it should, and nothing else.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxlite import _sequential
from fluxlite.kernels import repitch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.int8)


def _random(shape: tuple[int, int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(DEVICE, dtype)
    return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int16).to(DEVICE, dtype)


def _poisoned(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan") if dtype.is_floating_point else 77, dtype=dtype, device=DEVICE)


def _expected(src: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=src.dtype, device=src.device)
    out[: src.shape[0], : src.shape[1]] = src
    return out


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(1, 40), cols=st.integers(1, 300),
       extra_rows=st.integers(0, 9), extra_cols=st.integers(0, 70), pitch_extra=st.integers(0, 5),
       seed=st.integers(0, 2**31 - 1))
def test_pad_of_any_rows_matches_the_zero_padded_tensor(dtype, rows, cols, extra_rows, extra_cols, pitch_extra, seed):
    """``dst = src`` with zeros after, for ``src`` a view of rows ``pitch_extra`` longer (off any word)."""
    gen = torch.Generator().manual_seed(seed)
    src = _random((rows, cols + pitch_extra), dtype, gen)[:, :cols]
    dst = _poisoned((rows + extra_rows, cols + extra_cols), dtype)
    assert repitch.launch(src, dst, {})
    assert torch.equal(dst, _expected(src, dst.shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols,pitch", [(50, 1001, 1008), (33, 7, 8), (9, 13, 16), (1, 5, 8), (5, 1027, 1032),
                                             (3, 6, 8), (17, 64, 72)])
def test_crop_of_padded_rows_is_their_first_columns(dtype, rows, cols, pitch):
    """``wide[:, :N]`` into a contiguous ``[M, N]``: the element path where ``N`` is off a word, the
    word path where it is not; fresh random data, a poisoned ``dst``."""
    wide = _random((rows, pitch), dtype, torch.Generator().manual_seed(rows * pitch + cols))
    dst = _poisoned((rows, cols), dtype)
    repitch.launch(wide[:, :cols], dst, {})
    assert torch.equal(dst, wide[:, :cols])


def test_both_paths_run():
    """The pads above take the word path and the odd crops the element path: which one a call takes is
    decided by the shapes, and each must have been taken."""
    taken = []
    original = repitch.direct.launch

    def spy(fn, cache, grid, args, constexprs, **kw):
        taken.append(constexprs["WORDS"])
        return original(fn, cache, grid, args, constexprs, **kw)

    repitch.direct.launch = spy
    try:
        gen = torch.Generator().manual_seed(3)
        repitch.launch(_random((6, 11), torch.bfloat16, gen), _poisoned((8, 64), torch.bfloat16), {})  # a pad
        repitch.launch(_random((6, 16), torch.bfloat16, gen)[:, :11], _poisoned((6, 11), torch.bfloat16), {})  # a crop
    finally:
        repitch.direct.launch = original
    assert taken == [True, False]


@pytest.mark.parametrize("src,dst", [
    (torch.zeros(4, 8), torch.zeros(3, 8)),  # dst has fewer rows
    (torch.zeros(4, 8), torch.zeros(4, 7)),  # or columns
    (torch.zeros(4, 8), torch.zeros(4, 8, dtype=torch.float16)),  # another dtype
    (torch.zeros(8, 4).t(), torch.zeros(4, 8)),  # src's columns strided
    (torch.zeros(4, 8), torch.zeros(8, 4).t()),  # dst not contiguous
    (torch.zeros(4, 8, dtype=torch.float64), torch.zeros(4, 8, dtype=torch.float64)),  # 8-byte elements
])
def test_what_it_does_not_take_is_refused_before_any_launch(src, dst):
    """It says so and launches nothing (the callers then copy with torch); dst keeps its contents."""
    src, dst = src.to(DEVICE), dst.to(DEVICE).fill_(7)
    assert not repitch.launch(src, dst, {})
    assert bool((dst == 7).all())


@pytest.mark.gpu
@pytest.mark.parametrize("M,K,N", [(4096, 4099, 3001), (3000, 8190, 2001), (2, 11037, 1804), (777, 6001, 4104)])
def test_zero_padded_and_first_columns_on_cuda_at_operand_sizes(M, K, N):
    """The two users at a fused call's sizes: ``a`` and the weight padded to whole rows of ``K`` (to 64
    and to 8), a padded output cropped back to ``N`` columns, fresh and into a poisoned ``out``."""
    gen = torch.Generator().manual_seed(M + K + N)
    a, w = _random((M, K), torch.bfloat16, gen), _random((N, K), torch.bfloat16, gen)
    for rows, unit in ((0, 64), (-N % 8, 8)):
        for x, r in ((a, 0), (w, rows)):
            y = _sequential.zero_padded(x, r, -K % unit)
            assert y.is_contiguous() and torch.equal(y, _expected(x, y.shape))
    wide = _random((M, N + -N % 8 + 8), torch.bfloat16, gen)
    out = _poisoned((M, N), torch.bfloat16)
    assert _sequential.first_columns(wide, N, out) is out and torch.equal(out, wide[:, :N])
    assert torch.equal(_sequential.first_columns(wide, N, None), wide[:, :N])


_CAPTURE_FIRST = """
import torch
from fluxlite import _sequential
gen = torch.Generator(device="cuda").manual_seed(7)
x = torch.randn(4096, 3001, device="cuda", generator=gen).to(torch.bfloat16)
w = (torch.randn(2001, 3001, device="cuda", generator=gen) / 3001 ** 0.5).to(torch.bfloat16)
assert _sequential.pads_rows(x, w)
out = torch.full((4096, 2001), float("nan"), device="cuda", dtype=torch.bfloat16)
ones = torch.ones(8, 8, device="cuda", dtype=torch.bfloat16)
torch.matmul(ones, ones)  # cuBLAS's handle made outside the capture, as torch needs (nothing padded)
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):  # no eager call first: the copy has never been launched in this process
    _sequential.linear_into(out, x, w, None)
for _ in range(2):
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    err = ((out.float() - x.float() @ w.float().t()).norm() / (x.float() @ w.float().t()).norm()).item()
    assert err < 1e-2, err
_sequential.linear_into(out, x, w, None)  # eager, then a capture of the copies already launched
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    _sequential.linear_into(out, x, w, None)
out.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
assert ((out.float() - x.float() @ w.float().t()).norm() / (x.float() @ w.float().t()).norm()).item() < 1e-2
print("ok")
"""


@pytest.mark.gpu
def test_a_padded_gemm_captured_before_any_eager_call():
    """A fresh process captures sequential's padded GEMM in a CUDA graph before anything has launched
    the copy (its first launch, a compile and a module load, inside the capture), and the replays
    compute the product into a poisoned ``out``; so does a capture after an eager call."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _CAPTURE_FIRST], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-2000:] + run.stderr[-3000:]
