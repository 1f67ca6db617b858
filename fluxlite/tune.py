"""Per-shape autotuning of the fused GEMM's block configuration, on each rank alone.

What is tuned
-------------
The :class:`~fluxlite.kernels.fused_gemm.GemmConfig` (block sizes, ``GROUP_M``, warps, pipeline
stages) that :func:`~fluxlite.kernels.fused_gemm.fused_gemm_kernel` runs with, per GEMM shape. On
a cache miss, every config of :data:`CANDIDATES` is timed on the plain-GEMM entry point of the same
kernel (:func:`~fluxlite.kernels.fused_gemm.gemm`: no communication, so the timing is the GEMM's
own; the fused ops add the same waits and epilogue traffic to every candidate) and the fastest wins
if it beats the default by :data:`MIN_GAIN`.

Why each rank tunes alone
-------------------------
Tuning runs no collective: a rank whose peer never arrives must get fluxlite's bounded timeout
error, not wait in an all-reduce until the process group's timeout. So ranks may choose different
configs (their timings differ by noise), and the choice must not change what ranks signal to each
other: every rank cuts its chunks into splits of whole row blocks, and peers signal each other per
(chunk, split) (AG's pushed rows, GEMM-RS's partials), so every rank must use the same
``block_m``. All candidates share the default ``block_m``; they differ in what only the local
kernel sees (``block_n``, stages, ``GROUP_M``).

What is cached, for how long
----------------------------
The chosen config, keyed by ``(op, M rounded up to a power of two, K, N, dtype, b_kmajor, device
name)``, in this process, for its lifetime (or until :func:`clear_cache`). Nothing is written to disk.
The first call of a bucket pays the tuning (milliseconds, plus compiling each candidate once per
process), and its peers wait for it inside their fused kernels meanwhile.

Switches
--------
- Off unless ``FLUXLITE_AUTOTUNE=1``: :class:`GemmConfig()` everywhere. Measured on 2xH200 over
  the ANCHORS.md shapes (BENCHMARKS.md), no candidate beat the default by the margin in the fused
  ops, and the first call of each shape compiles and times every candidate while the peers spin
  (tens of seconds with a cold Triton cache). Turn it on for shapes far from those.
- Without CUDA, or under the Triton interpreter, the interpreter's fixed
  :data:`~fluxlite.kernels.fused_gemm.INTERPRET_CONFIG` is returned at once (no timing), unless the
  caller injects its own ``measure`` (the tests do).
- While a CUDA graph is being captured nothing can be timed: a miss returns the default config
  without caching it (warm up before capturing to run the tuned one).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import statistics
from typing import Callable

import torch

from .errors import FluxliteError
from .kernels import fused_gemm
from .kernels.fused_gemm import GemmConfig

log = logging.getLogger(__name__)

OPS = ("ag_gemm", "gemm_rs")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # what the ops accept (_validate)

# Shared memory of each candidate from the compiler (sm_90 cross-compile, bf16, MODE=AG, TMA): the
# pipeline's stages * (block_m + block_n) * block_k * 2 bytes plus barriers, with the TMA
# epilogue's tile reusing that space. The limit per block on H100/H200 is 232448 bytes.
CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(),  # 128x256x64, 8 warps, 3 stages, group 8: the default, first so that it wins ties
    GemmConfig(group_m=16),  # wider L2 swizzle: more row blocks share each B column block
    GemmConfig(num_stages=4),  # one more stage in flight (196 KB of shared memory)
    GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4, group_m=8),  # small N
)
"""The configs timed on CUDA, the default first (all fit Hopper's shared memory, none spills; all
have the same ``block_m``, see the module docstring)."""

WARMUP_CALLS = 3
TIMED_CALLS = 20
MIN_GAIN = 0.03
"""A candidate replaces the default only if it is this much faster. Configs within a few percent
of each other swap places from run to run (an H200 running GEMMs sits at its power cap), and the
fused kernel adds waits and copies that the plain-GEMM timing does not see: measured on 2xH200,
picks from noise made the fused ops up to 3% slower (BENCHMARKS.md)."""

_CACHE: dict[tuple, GemmConfig] = {}

Measure = Callable[[GemmConfig], float]


def clear_cache() -> None:
    """Forget every chosen config (the next call of each shape tunes again)."""
    _CACHE.clear()


def autotune_enabled() -> bool:
    """True when ``FLUXLITE_AUTOTUNE=1``; otherwise :func:`choose_config` returns ``GemmConfig()``."""
    return os.environ.get("FLUXLITE_AUTOTUNE", "0") == "1"


def choose_config(
    op: str,
    *,
    M: int,
    K: int,
    N: int,
    dtype: torch.dtype,
    b_kmajor: bool,
    device: torch.device,
    measure: Measure | None = None,
) -> GemmConfig:
    """The fastest of :data:`CANDIDATES` for one rank's GEMM of ``op`` (cached per shape bucket).

    ``(M, K, N)`` is the GEMM the kernel runs on each rank: ``ag_gemm``: the gathered
    ``[W*m, K] @ weight[N_local, K].T``; ``gemm_rs``: ``a[M, K_local] @ weight[N, K_local].T``.
    ``b_kmajor``: the weight is the transpose of a row-major ``[K, N]`` (a backward's ``W.t()``).
    ``measure(cfg) -> ms``: the timer; ``None`` times :func:`fused_gemm.gemm` with CUDA events. A
    candidate whose measure raises counts as ``inf``.

    Raises ``ValueError`` on a bad argument, :class:`~fluxlite.errors.FluxliteError` when no
    candidate ran.
    """
    device = _check_args(op, M, K, N, dtype, b_kmajor, device, measure)
    if measure is None and (device.type != "cuda" or fused_gemm.interpreting()):
        return fused_gemm.INTERPRET_CONFIG  # the interpreter runs one fixed small config
    if not autotune_enabled():
        return GemmConfig()
    key = (op, _bucket(M), K, N, dtype, b_kmajor, _device_name(device))
    cfg = _CACHE.get(key)
    if cfg is not None:
        return cfg
    if measure is None and torch.cuda.is_current_stream_capturing():
        return GemmConfig()  # nothing can be timed inside a capture

    configs = CANDIDATES
    timings, errors = _time_candidates(configs, measure or _cuda_timer(M, K, N, dtype, b_kmajor, device))
    best = min(range(len(configs)), key=lambda i: timings[i])  # the first of equal minima
    if not math.isinf(timings[0]) and timings[best] > (1 - MIN_GAIN) * timings[0]:
        best = 0  # the default (first) unless another is clearly faster
    if math.isinf(timings[best]):
        local = "; ".join(f"{_short(configs[i])}: {err}" for i, err in errors.items()) or "none"
        raise FluxliteError(
            f"fluxlite autotune {op}: no candidate GEMM config ran for M={M} K={K} N={N} {dtype} "
            f"b_kmajor={b_kmajor} on {_device_name(device)}; failures: {local}"
        )
    cfg = configs[best]
    log.debug("fluxlite autotune %s %s: %s (ms per candidate: %s)", op, key, cfg, timings)
    _CACHE[key] = cfg
    return cfg


def _bucket(M: int) -> int:
    """Rows rounded up to a power of two: calls whose M varies (ragged batches) tune once per bucket."""
    return 1 << (M - 1).bit_length()


def _check_args(op, M, K, N, dtype, b_kmajor, device, measure) -> torch.device:
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"choose_config: op must be one of {OPS}, got {op!r}")
    for name, v in (("M", M), ("K", K), ("N", N)):
        # bool is an int subclass; True as a dimension is a bug, not 1.
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"choose_config: {name} must be a positive int, got {v!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"choose_config: dtype must be one of {_DTYPES}, got {dtype!r}")
    if not isinstance(b_kmajor, bool):
        raise ValueError(f"choose_config: b_kmajor must be a bool, got {b_kmajor!r}")
    if isinstance(device, str):
        device = torch.device(device)
    if not isinstance(device, torch.device):
        raise ValueError(f"choose_config: device must be a torch.device, got {type(device).__name__}")
    if measure is not None and not callable(measure):
        raise ValueError(f"choose_config: measure must be callable (cfg) -> ms or None, got {type(measure).__name__}")
    return device


@functools.lru_cache(maxsize=None)  # looked up on every fused call
def _device_name(device: torch.device) -> str:
    # The model, not the index: every GPU of one model gives the same answer.
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _short(cfg: GemmConfig) -> str:
    return (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} "
            f"g{cfg.group_m}")


def _time_candidates(configs, measure: Measure) -> tuple[list[float], dict[int, str]]:
    """ms per config (``inf`` where it raised or gave no finite time), and the errors."""
    timings, errors = [], {}
    for i, cfg in enumerate(configs):
        try:
            ms = float(measure(cfg))
        except Exception as exc:  # e.g. triton OutOfResources (shared memory)
            timings.append(math.inf)
            errors[i] = f"{type(exc).__name__}: {exc}"
            continue
        if not ms >= 0 or math.isinf(ms):  # NaN / negative: a broken timer, not a fast kernel
            errors[i] = f"measured {ms} ms"
            ms = math.inf
        timings.append(ms)
    return timings, errors


def _cuda_timer(M: int, K: int, N: int, dtype: torch.dtype, b_kmajor: bool, device: torch.device) -> Measure:
    """A ``measure``: median ms of :data:`TIMED_CALLS` ``fused_gemm.gemm`` calls after :data:`WARMUP_CALLS`.

    Operands: ``a [M, K]``, weight ``[N, K]`` (or, ``b_kmajor``, the ``.t()`` of a contiguous ``[K, N]``,
    which the kernel reads K-major as in the real call), ``out [M, N]``; allocated once per tuning,
    random from a private generator so that tuning does not move the caller's CUDA RNG stream.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    a = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
    if b_kmajor:
        weight = torch.randn(K, N, device=device, dtype=dtype, generator=gen).t()
    else:
        weight = torch.randn(N, K, device=device, dtype=dtype, generator=gen)
    out = a.new_empty((M, N))

    # Let earlier fused calls finish first: a config's first launch loads its module, and loading
    # beside a fused kernel that spins can deadlock (ANCHORS.md: lazy module loading).
    torch.cuda.synchronize(device)

    def measure(cfg: GemmConfig) -> float:
        with torch.no_grad(), torch.cuda.device(device):
            for _ in range(WARMUP_CALLS):  # the first call compiles this config
                fused_gemm.gemm(a, weight, config=cfg, out=out)
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(TIMED_CALLS)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(TIMED_CALLS)]
            for s, e in zip(starts, ends):
                s.record()
                fused_gemm.gemm(a, weight, config=cfg, out=out)
                e.record()
            torch.cuda.synchronize(device)
            return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    return measure
