"""fluxlite.tune: the choice among the candidates, its cache, the env switch, argument checks, and
that ranks choosing differently still agree on what the tile protocol between them depends on.

Timings are injected (``measure``: a dict cfg -> ms), so everything runs on CPU; an injected
``measure`` bypasses the no-CUDA shortcut.
"""

from __future__ import annotations

import math

import pytest
import torch

from fluxlite import tune
from fluxlite.errors import FluxliteError
from fluxlite.kernels import fused_gemm
from fluxlite.kernels.fused_gemm import GemmConfig

C = tune.CANDIDATES
CPU = torch.device("cpu")
SHAPE = dict(M=4096, K=1024, N=2048, dtype=torch.bfloat16, b_kmajor=False)


class FakeTimer:
    """``measure`` from ms per candidate index; ``None`` raises, as an over-sized config would."""

    def __init__(self, ms: list[float | None]) -> None:
        assert len(ms) == len(C)
        self.ms = dict(zip(C, ms))
        self.calls = 0

    def __call__(self, cfg: GemmConfig) -> float:
        self.calls += 1
        if self.ms[cfg] is None:
            raise RuntimeError(f"out of resources: {cfg}")
        return self.ms[cfg]


def choose(measure, op: str = "ag_gemm", **shape) -> GemmConfig:
    return tune.choose_config(op, **{**SHAPE, **shape}, device=CPU, measure=measure)


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setenv("FLUXLITE_AUTOTUNE", "1")
    tune.clear_cache()
    yield
    tune.clear_cache()


def test_candidates():
    assert C[0] == GemmConfig()  # the default wins ties
    assert len(set(C)) == len(C) == 4
    # Ranks tune alone and may choose differently: they must still cut chunks into the same splits.
    assert {cfg.block_m for cfg in C} == {GemmConfig().block_m}
    for cfg in C:
        # Pipeline buffers fit Hopper's 227 KB per block (the sm_90 compile reports the same figure).
        assert cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * 2 <= 232448
        assert cfg.num_progs == 0  # one program per SM


def test_argmin_and_ties():
    assert choose(FakeTimer([3.0, 2.0, 2.0, 1.0])) == C[3]
    tune.clear_cache()
    assert choose(FakeTimer([2.0, 1.0, 1.0, 1.0])) == C[1]  # the earliest of equal minima
    tune.clear_cache()
    assert choose(FakeTimer([1.0] * len(C))) == C[0]


def test_default_kept_unless_clearly_faster():
    gain = tune.MIN_GAIN
    assert choose(FakeTimer([1.0, 1.0 - 0.9 * gain, 1.1, 1.1])) == C[0], "a gain within noise keeps the default"
    tune.clear_cache()
    assert choose(FakeTimer([1.0, 1.0 - 1.5 * gain, 1.1, 1.1])) == C[1]
    tune.clear_cache()
    assert choose(FakeTimer([None, 2.0, 1.0, 3.0])) == C[2], "a default that fails is no reference"


def test_raising_candidate_is_skipped():
    timer = FakeTimer([None, 5.0, 2.0, None])
    assert choose(timer) == C[2]
    assert timer.calls == len(C)  # the candidates after a failure are still timed


def test_nonfinite_time_is_skipped():
    assert choose(FakeTimer([math.nan, 5.0, -1.0, 6.0])) == C[1]
    tune.clear_cache()
    assert choose(FakeTimer([math.inf, 6.0, 5.0, 7.0])) == C[2]


def test_all_fail_raises():
    with pytest.raises(FluxliteError, match="no candidate GEMM config.*out of resources"):
        choose(FakeTimer([None] * len(C)))
    # Nothing was cached: the next call measures again.
    timer = FakeTimer([1.0] * len(C))
    assert choose(timer) == C[0] and timer.calls == len(C)


def test_cache_per_key():
    timer = FakeTimer([3.0, 1.0, 2.0, 2.0])
    assert choose(timer) == C[1]
    assert timer.calls == len(C)
    assert choose(timer) == C[1]
    assert timer.calls == len(C)  # a hit: no measuring
    expected = len(C)
    choose(timer, M=SHAPE["M"] - 1)  # the same power-of-two bucket: a hit
    assert timer.calls == expected
    for change in [dict(M=4097), dict(K=512), dict(N=4096), dict(dtype=torch.float16), dict(b_kmajor=True),
                   dict(op="gemm_rs")]:
        choose(timer, **change)
        expected += len(C)
        assert timer.calls == expected, change  # every part of the key is a different entry
    tune.clear_cache()
    choose(timer)
    assert timer.calls == expected + len(C)


@pytest.mark.parametrize("value", ["0", None])
def test_off_unless_asked_returns_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("FLUXLITE_AUTOTUNE")
    else:
        monkeypatch.setenv("FLUXLITE_AUTOTUNE", value)
    timer = FakeTimer([5.0, 1.0, 1.0, 1.0])
    assert choose(timer) == GemmConfig()
    assert timer.calls == 0


def test_no_cuda_shortcut():
    # Without an injected timer, CPU (and the interpreter, on any device) gets the interpreter's config.
    for device in (CPU, torch.device("cuda")) if fused_gemm.interpreting() else (CPU,):
        cfg = tune.choose_config("gemm_rs", **SHAPE, device=device)
        assert cfg == fused_gemm.INTERPRET_CONFIG


@pytest.mark.parametrize("change, match", [
    (dict(op="ag"), "op must be one of"),
    (dict(M=0), "M must be a positive int, got 0"),
    (dict(K=-3), "K must be a positive int, got -3"),
    (dict(N=2.0), "N must be a positive int, got 2.0"),
    (dict(M=True), "M must be a positive int, got True"),
    (dict(dtype=torch.int32), "dtype must be one of .* got torch.int32"),
    (dict(dtype="bf16"), "dtype must be one of"),
    (dict(b_kmajor=1), "b_kmajor must be a bool, got 1"),
    (dict(device=0), "device must be a torch.device, got int"),
    (dict(measure=3.0), "measure must be callable"),
])
def test_bad_args(change, match):
    kwargs = dict(op="ag_gemm", **SHAPE, device=CPU, measure=FakeTimer([1.0] * len(C)))
    kwargs.update(change)
    op = kwargs.pop("op")
    with pytest.raises(ValueError, match=match):
        tune.choose_config(op, **kwargs)


@pytest.mark.gpu
def test_cuda_tunes_and_runs():
    """On a GPU: the real timer picks a candidate, and the kernel with it computes the GEMM."""
    device = torch.device("cuda", torch.cuda.current_device())
    for b_kmajor in (False, True):
        M, K, N = 1024, 512, 768
        cfg = tune.choose_config("ag_gemm", M=M, K=K, N=N, dtype=torch.bfloat16, b_kmajor=b_kmajor,
                                 device=device)
        assert cfg in C
        a = torch.randn(M, K, device=device, dtype=torch.bfloat16)
        w = torch.randn(K, N, device=device, dtype=torch.bfloat16).t() if b_kmajor else \
            torch.randn(N, K, device=device, dtype=torch.bfloat16)
        out = fused_gemm.gemm(a, w, config=cfg)
        ref = a.float() @ w.float().t()
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
