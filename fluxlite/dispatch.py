"""Measured dispatch: the implementation and kernel config that ``impl="auto"`` runs, per shape and
per kind of call.

What is chosen
--------------
For each :class:`Key` (op, M bucket, K, N, dtype, world size, device name, fluxlite version) a
:class:`Choices`: three :class:`Choice` s, each ``"sequential"``, ``"decomposed"``, or ``"fused"``
with a :class:`~fluxlite.kernels.gemm_core.GemmConfig` from :data:`GPU_CONFIGS`: the choice for
throughput-bound calls, the one for latency-bound calls, and the one for calls of unknown kind,
which must not lose in either (``both``). M is bucketed geometrically,
:data:`M_BUCKETS_PER_OCTAVE` buckets per doubling (about 9% apart), so one measurement serves the
neighbouring token counts.

Which choice a call runs
------------------------
The mode of a call is read on every call, from state that costs no device work:

1. inside :func:`assume_mode`, the mode it names;
2. else ``FLUXLITE_AUTO_MODE`` (``throughput``, ``latency`` or ``both``);
3. else ``throughput`` while a CUDA graph is being captured on the current stream (a graph, or
   ``torch.compile(mode="reduce-overhead")``, queues its whole work at replay, so the device time
   counts, not the host's);
4. else ``both``.

An eager call is not classified further: whether the device is idle when it is made differs from
rank to rank (a stream query would say so, but each rank would then pick by its own state, and
ranks that run different implementations of one collective wait on each other until the timeout),
and the host cannot tell a decode loop from a training step cheaply. So an eager call runs the
choice that is within bound in both modes, unless the program says which mode its calls are in.
Every rank must make the same call in the same mode, as it must pass the same arguments. Inside
``torch.compile`` without CUDA graphs the ops run eagerly and take ``both`` too. The context of
:func:`assume_mode` does not reach the autograd engine's threads (the backward), the variable does.

A captured call runs its mode's choice only if that choice ran eagerly with the same rows in this
process (a measurement runs every candidate); else it runs ``both``, what an eager warm-up of the
call ran: a fused call can only be captured after it ran eagerly with its shape
(docs/cuda_graphs.md), and the warm-up may have run in another mode. To capture the throughput
choice, warm up inside ``assume_mode("throughput")`` (or measure first, in the same process).

A repeated call costs what a call that names its implementation costs, and one read of
:func:`repeat_stamp`: the ops remember an eager ``auto`` call's decisions (its choice, and for fused
its plan) under its arguments and the stamp, which changes whenever the choices in memory or the
declared mode do, so a call that finds them runs them without asking dispatch. Where it finds none,
it asks :func:`eager_choice_of`, by the call's signature: one look-up that keeps
:func:`eager_choice`'s answer (the key's choices, then the mode as above) while the choices, the
declared mode and any :func:`tuning` block are unchanged. Where a call's choice depends on whether
it is captured (:func:`depends_on_capture`: no mode declared and the modes' choices differ), both
ask the capture state on every call.

When a key is first seen in a process
-------------------------------------
All ranks take one agreement step together, through the process group's store (bounded by
fluxlite's timeout, :mod:`fluxlite.rendezvous`): each publishes the key, the choices its cache file
holds for it (if any), whether it can build a workspace, and its host. Ranks whose keys differ raise
:class:`~fluxlite.errors.FluxliteCallMismatchError`. If every rank's file holds the same choices,
they are used. Otherwise all ranks measure every candidate together (:func:`measure_until_settled`
with :mod:`fluxlite.timing`: the same calls on every rank, every round timing every candidate in
throughput and latency mode, each round's reading the max over the ranks), so every rank computes
the same winners from the same figures and they can never disagree. The choices are kept in memory
and written to the cache file. A rank with a cache file and a rank without one therefore still take
the same step; the measuring ranks only run the op itself, whose waits are bounded as every call's
are.

The rule (:func:`decide`)
-------------------------
The rounds interleave the candidates, so each round gives every candidate a ratio to sequential
(the baseline) in each mode, paired: the same clocks, the same round. Of each candidate's ratios
per mode :func:`decide` takes the median and its distribution-free :data:`CONFIDENCE` bounds (order
statistics of the ratios, :func:`ratio_bounds`; at least 5 rounds give one). A candidate

- *wins* a mode when its upper bound is below ``1 - TIE_MARGIN`` (faster than sequential by more
  than the tie margin, at the stated confidence);
- is *safe* in a mode when its upper bound is at most ``1 + MAX_LOSS``.

The throughput and the latency choice: among the candidates that win the mode, the first by
preference (sequential, then fused with the default config first, then decomposed), given up for a
later one only where that one is faster than it by more than :data:`TIE_MARGIN` at
:data:`CONFIDENCE` (their paired ratios, :func:`_settled_best`); sequential when none wins. In
latency mode a tie goes to the smaller host time: where no candidate wins, one whose median latency
ratio is at most 1 and whose host time is settled below sequential's (the high bound of their paired
host-time ratios under ``1 - TIE_MARGIN``) is the latency choice, the least host time first. A call
that waits for its result waits for the host's work as well as the device's, and a host busier than
the measurement's (a program that does more between calls) lengthens the call with more host work
the more: measured at the same shapes on 2×H200, GEMM-RS at 512 and 1024 rows tied with sequential
in ``auto``'s own rounds and was 1.05-1.18× faster in the profiler's, with half its host time.

The ``both`` choice, an eager call's, reads the time of eager calls back to back with nothing
queued ahead of them (:data:`EAGER`) in place of the throughput mode's device time: such a call
waits for its host as well as its device. At small M the two differ most: on 2×H200, AG-GEMM with
GELU at 228 gathered rows took 0.05 ms of device time sequential and 0.11 ms fused, but
sequential's host took 0.10-0.13 ms per call and fused's 0.05-0.06, so eager calls back to back ran
fused in 0.11 ms and sequential in 0.15. (A program that queues such small eager calls behind other
device work declares ``throughput``.)
Among sequential and the candidates that are safe in both of these and win one, the least worst
slowdown over them against the best (``max(r_eager / best_eager, r_lat / best_lat)``), by the same
rule: the first by preference, given up for a later one only where their paired ratios settle that
the later one's worst slowdown is the smaller (:func:`_settled_least_worst`). So no choice is
slower than sequential beyond noise in its mode, and ``both`` in neither of its readings.

While a win or the safety of a candidate that could win is unsettled (its bounds straddle the
threshold in a reading, or there are too few rounds for bounds), more rounds time sequential and
the unsettled candidates, up to a bound (:data:`_MEASURE`). What is still unsettled then is decided
by its median, within the loss bound (``final`` of :func:`decide`): a candidate whose median is
faster than sequential by more than the tie margin and whose high bound is at most
``1 + MAX_LOSS`` wins the mode; one whose median is at most 1 is safe in it. So no choice is slower
than sequential beyond noise, and a call whose readings stay noisy (latency mode at calls of a
tenth of a millisecond spread by a fifth on 2xH200) is not kept sequential where the rounds that
did settle say another candidate is faster (counted as neither a win nor safe, an unsettled
reading would keep GEMM-AllReduce 200x4104->3629's eager calls on 2xH200 sequential at 1.16x the
fused calls' time, fused's latency bounds straddling 1.02 around a median below 1).

Switches (environment)
----------------------
- ``FLUXLITE_AUTO=on`` (default): measure on CUDA; on CPU use :func:`rule` (the fused protocol on
  CPU ranks exercises the protocol, it is not a fast path). ``off``: :func:`rule` everywhere, no
  measuring, no agreement step. ``measure``: measure on CPU too (tests, CPU tuning).
- ``FLUXLITE_AUTO_MODE``: which choice calls run (above).
- Both are read at the first ``auto`` call of the process, and again after :func:`clear_memory`.
- ``FLUXLITE_WORKSPACE=off``: ``auto`` treats the symmetric workspace as unavailable (as without
  symmetric memory): it never picks fused, and the rule picks decomposed where it would pick fused.
- ``FLUXLITE_CACHE_DIR``: the cache file's folder (default: ``platformdirs``' user cache dir of
  ``fluxlite``, else ``$XDG_CACHE_HOME/fluxlite``, else ``~/.cache/fluxlite``).
- :func:`tuning` (what ``fluxlite-profile --tune`` uses): measure every key met inside it once, on
  any device, even when cached.

While a CUDA graph is captured nothing is measured: a key not yet chosen takes the rule.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import itertools
import json
import math
import os
import socket
import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
import functools
from pathlib import Path

import torch

from . import rendezvous
from . import workspace as _workspace
from .errors import FluxliteCallMismatchError, FluxliteError
from .group import TPGroup
from .kernels.gemm_core import GemmConfig
from .process import PROCESS
from .timing import Timer, per_round, run_each_once, time_samples

RULE_MIN_FLOPS = 5e11
"""The rule takes the fused path on GPU from the smallest GEMM measured to win on 2xH200 (AG
8192x8192->5120 at TP=2: 6.9e11 FLOPs per rank, 1.23x over sequential) at any row count. Below it
the fused call's fixed host cost is not known to be hidden, except from :data:`RULE_MIN_ROWS` on."""
RULE_MIN_ROWS = 4096
RULE_MIN_FLOPS_AT_MIN_ROWS = 6e10
"""From :data:`RULE_MIN_ROWS` rows per call (AG: gathered) the rule takes the fused path from this
many FLOPs per rank: on 2xH200 fused beat sequential in both modes on every AG-GEMM and GEMM-RS
shape of the four presets at 4096 tokens and more, the smallest being 6.9e10 FLOPs (GEMM-RS
4096x2048->4096, 1.27x), while at 512-2048 rows it lost in throughput mode (0.75-0.98x;
BENCHMARKS.md)."""
GPU_FUSED_DTYPES = (torch.bfloat16, torch.float16)  # what the fused kernels take on CUDA

M_BUCKETS_PER_OCTAVE = 8
TIE_MARGIN = 0.01
"""A candidate wins a mode only if it is faster than sequential by more than this (at
:data:`CONFIDENCE`); among winners, a later one replaces an earlier one only if it is faster than
that one by more than this (at :data:`CONFIDENCE`)."""
MAX_LOSS = 0.02
"""The most the ``both`` choice may be slower than sequential in either mode (at :data:`CONFIDENCE`)."""
CONFIDENCE = 0.95
"""The confidence of each bound :func:`ratio_bounds` gives (one-sided)."""
MEASURED_MODES = ("throughput", "latency")
"""The modes of :mod:`fluxlite.timing` a measurement decides on."""
HOST = "host"
"""The host time of a call (:mod:`fluxlite.timing`), measured beside the modes: it settles a latency tie."""
EAGER = "eager"
"""Eager calls back to back with nothing queued ahead (:mod:`fluxlite.timing`): the device's time per
call, or the host's where that is longer. The ``both`` choice reads it in place of throughput
(module docstring)."""
CALL_MODES = (*MEASURED_MODES, "both")
"""The modes a call can be in (module docstring): each has its choice in :class:`Choices`."""
CACHE_SCHEMA = "fluxlite-dispatch/11"  # 11: GEMM-AllReduce's fused call on whole output rows (10: the
# padding's copies 2-2.5x faster, and padding from smaller GEMMs; 9: rows off 16 bytes padded to whole
# ones in sequential's GEMMs and GEMM-RS's fused call; 8: AG-GEMM's small calls gather in one kernel;
# 7: short chunks of wide layers take one GEMM; 6: a final verdict reads what is still open at its
# median; 5: ``both`` reads eager throughput; 4: a latency tie by host time): choices made by an
# earlier rule, or against an earlier path of a candidate, are made again
MEASURED_IMPLS = ("sequential", "decomposed", "fused")
MAX_KEYS = 4096  # call signatures whose Key is remembered; past this it starts again

GPU_CONFIGS: tuple[GemmConfig, ...] = (
    GemmConfig(),  # 128x256x64, 8 warps, 3 stages, group_m 8: the default (0.97-1.06x cuBLAS on 2xH100)
    GemmConfig(group_m=16),  # a wider L2 swizzle: the best on long K (8192x14336->8192: 1.000 against 1.031)
    GemmConfig(num_stages=4),  # one more stage in flight: the best where N is short (16384x4096->8192)
    GemmConfig(num_stages=4, group_m=16),
)
"""The kernel configs measured for fused on CUDA, the default first; each op measures those its
kernel holds (``Op.kernel_configs``: GEMM-RS's fused tile loops hold 3 stages, not 4). Each fits an
H100/H200 block's shared memory in the kernels that run it (tests/test_dispatch.py compiles them
for sm_90). 128x128 and 256x128 blocks (4 or 8
warps, 3-5 stages) and 128-wide K steps were measured too and never won on 24 shapes on an H100
(BENCHMARKS.md). Configs may differ in ``block_m``: splits are part of the cross-rank protocol, and
the agreement makes every rank use the same one."""


@dataclass(frozen=True)
class Rounds:
    """How a call-time measurement runs: ``first`` rounds, then ``more`` at a time while the verdict
    is unsettled, ``most`` in all; ``warmup`` calls, throughput batches of ``batch_ms`` of device
    work and at most ``max_batch`` calls (:func:`fluxlite.timing.time_samples`)."""

    first: int
    more: int
    most: int
    warmup: int
    batch_ms: float
    max_batch: int


_MEASURE = {"cuda": Rounds(first=5, more=5, most=20, warmup=2, batch_ms=5.0, max_batch=10),
            "cpu": Rounds(first=5, more=5, most=10, warmup=1, batch_ms=2.0, max_batch=2)}


@dataclass(frozen=True)
class Choice:
    """What runs: ``impl``, and for fused the kernel ``config`` (``None``: the default).
    ``source``: ``"explicit"``, ``"rule"``, ``"measured"`` or ``"cache"`` (not part of equality)."""

    impl: str
    config: GemmConfig | None = None
    source: str = dataclasses.field(default="rule", compare=False)

    @property
    def label(self) -> str:
        return self.impl if self.config is None else f"{self.impl}[{config_label(self.config)}]"

    def to_json(self) -> dict:
        return dict(impl=self.impl, config=None if self.config is None else dataclasses.asdict(self.config))


def config_label(c: GemmConfig) -> str:
    return f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages} g{c.group_m}"


@dataclass(frozen=True)
class Choices:
    """The choice of each mode for one key (module docstring): ``throughput``, ``latency`` and
    ``both`` (within bound in both modes). Equal choices are one object, so :attr:`uniform` and the
    identity checks of repeated calls (:func:`remembered`) are cheap."""

    throughput: Choice
    latency: Choice
    both: Choice
    uniform: bool = dataclasses.field(init=False, repr=False, compare=False)
    """One choice for every mode (then no call needs its mode)."""
    warm: set[tuple[int, int]] = dataclasses.field(default_factory=set, repr=False, compare=False)
    """``(rows of a, id(choice))`` of the mode choices other than ``both`` that ran eagerly in this
    process for this key (a measurement runs them all), so that a CUDA graph captures only what ran
    eagerly (:func:`choose`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "uniform", self.throughput is self.latency is self.both)

    @property
    def fused(self) -> bool:
        """Whether a mode's choice is fused."""
        return "fused" in (self.throughput.impl, self.latency.impl, self.both.impl)

    @classmethod
    def of(cls, throughput: Choice, latency: Choice, both: Choice) -> Choices:
        """The three, equal ones made one object (the first of them)."""
        pool: list[Choice] = []

        def one(choice: Choice) -> Choice:
            same = next((c for c in pool if c == choice), None)
            if same is None:
                pool.append(choice)
            return same or choice

        return cls(one(throughput), one(latency), one(both))

    @classmethod
    def same(cls, choice: Choice) -> Choices:
        """``choice`` in every mode."""
        return cls(choice, choice, choice)

    def for_call(self, device: torch.device) -> Choice:
        """The choice a call on ``device`` runs now (:func:`call_mode`)."""
        return self.both if self.uniform else getattr(self, call_mode(device))

    def to_json(self) -> dict:
        """``both`` at the top (``impl``, ``config``), the mode choices under ``modes``."""
        return dict(self.both.to_json(), modes={m: getattr(self, m).to_json() for m in MEASURED_MODES})


@dataclass(frozen=True)
class Key:
    """A dispatch key. ``rows``: the GEMM's rows on each rank (AG: ``W*m``; RS: ``M``), bucketed."""

    op: str
    m_bucket: int
    K: int
    N: int
    dtype: str
    world_size: int
    device: str
    version: str

    @classmethod
    def of(cls, op: str, tp: TPGroup, a: torch.Tensor, weight: torch.Tensor, rows: int) -> Key:
        """``op``: an op's name (``"ag_gemm"``, ``"gemm_rs"``, ``"gemm_ar"``), with its variant after a
        ``+`` (``"ag_gemm+gathered"``: ``return_gathered``);
        ``a: [rows per rank, K]``, ``weight: [N, K]``. Remembered per call signature (one dict
        look-up for a repeated call)."""
        return cls.of_size(op, tp.world_size, a, weight, rows)

    @classmethod
    def of_size(cls, op: str, world_size: int, a: torch.Tensor, weight: torch.Tensor, rows: int) -> Key:
        """:meth:`of` for a group of ``world_size`` ranks."""
        signature = (op, world_size, rows, a.shape[1], weight.shape[0], a.dtype, a.device)
        key = _STATE.keys.get(signature)
        if key is None:
            if len(_STATE.keys) >= MAX_KEYS:
                _STATE.keys.clear()
            key = _STATE.keys[signature] = cls(op, m_bucket(rows), a.shape[1], weight.shape[0],
                                               str(a.dtype).replace("torch.", ""), world_size,
                                               device_name(a.device), _version())
        return key

    @property
    def rows(self) -> int:
        """The rows at the centre of the key's bucket (a call's rows are within 5% of them)."""
        return round(2 ** (self.m_bucket / M_BUCKETS_PER_OCTAVE))

    @property
    def text(self) -> str:
        lo, hi = bucket_rows(self.m_bucket)
        return (f"{self.op} M={lo}-{hi} K={self.K} N={self.N} {self.dtype} W={self.world_size} "
                f"{self.device} fluxlite-{self.version}")

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(dataclasses.astuple(self)))

    def __hash__(self) -> int:  # computed once: a repeated call looks keys up several times
        return self._hash

    @functools.cached_property
    def torch_device(self) -> torch.device:
        """The device of this key's calls (the current CUDA device for a CUDA key)."""
        return torch.device("cuda" if self.device.startswith("cuda") else self.device)


def m_bucket(rows: int) -> int:
    return round(M_BUCKETS_PER_OCTAVE * math.log2(max(rows, 1)))


def bucket_rows(bucket: int) -> tuple[int, int]:
    """The row counts ``[lo, hi]`` that fall into ``bucket``."""
    lo = math.ceil(2 ** ((bucket - 0.5) / M_BUCKETS_PER_OCTAVE))
    hi = math.ceil(2 ** ((bucket + 0.5) / M_BUCKETS_PER_OCTAVE)) - 1
    return max(lo, 1), max(hi, 1)


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    return f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def _version() -> str:
    return getattr(sys.modules.get("fluxlite"), "__version__", "unknown")


def auto_mode() -> str:
    mode = os.environ.get("FLUXLITE_AUTO", "on")
    if mode not in ("on", "off", "measure"):
        raise ValueError(f"FLUXLITE_AUTO must be 'on', 'off' or 'measure', got {mode!r}")
    return mode


def _check_mode(mode, what: str) -> str:
    if mode not in CALL_MODES:
        raise ValueError(f"{what} must be one of {CALL_MODES}, got {mode!r}")
    return mode


_ASSUMED: contextvars.ContextVar[str | None] = contextvars.ContextVar("fluxlite_auto_mode", default=None)


@contextlib.contextmanager
def assume_mode(mode: str):
    """Inside, ``auto`` runs the choice of ``mode`` (``"throughput"``, ``"latency"`` or ``"both"``)
    for the calls made in this context (module docstring): e.g. ``"latency"`` around a decode loop
    that waits for each step. Every rank must enter it around the same calls."""
    token = _ASSUMED.set(_check_mode(mode, "mode"))
    try:
        yield
    finally:
        _ASSUMED.reset(token)


def call_mode(device: torch.device) -> str:
    """The mode of a call on ``device`` made now: :func:`assume_mode`'s, else ``FLUXLITE_AUTO_MODE``,
    else ``"throughput"`` under CUDA-graph capture, else ``"both"`` (module docstring)."""
    return _mode_of(_workspace.capturing(device))


def _mode_of(capturing: bool) -> str:
    return _declared_mode() or ("throughput" if capturing else "both")


def _declared_mode() -> str:
    """The mode the program declares (:func:`assume_mode`'s, else ``FLUXLITE_AUTO_MODE``), or ``""``."""
    mode = _ASSUMED.get()
    if mode is None:
        mode = _STATE.mode if _STATE.mode is not None else _STATE.env_mode()
    return mode


def fused_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this rank can run fused for ``dtype`` on ``device`` (ignoring its peers)."""
    if os.environ.get("FLUXLITE_WORKSPACE", "on") == "off":
        return False
    if device.type != "cuda":
        return True
    if dtype not in GPU_FUSED_DTYPES:
        return False
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError:
        return False
    return True


_RULE = {impl: Choice(impl, source="rule") for impl in MEASURED_IMPLS}


def rule(world_size: int, flops: float, device: torch.device, dtype: torch.dtype, rows: int = 0,
         min_flops_beyond_two: float = 0.0) -> Choice:
    """The documented rule: sequential on CPU, for a world of one and for GEMMs under
    :data:`RULE_MIN_FLOPS` per rank (``flops``), or under :data:`RULE_MIN_FLOPS_AT_MIN_ROWS` where
    the call has at least :data:`RULE_MIN_ROWS` rows (``rows``: the key's, AG's gathered), or, at
    more than two ranks, under the op's own ``min_flops_beyond_two``
    (:attr:`fluxlite.ops.op.Op.rule_min_flops_beyond_two`); above them on GPU (bf16/fp16) fused, or
    decomposed where the workspace is unavailable."""
    min_flops = RULE_MIN_FLOPS_AT_MIN_ROWS if rows >= RULE_MIN_ROWS else RULE_MIN_FLOPS
    if world_size > 2:
        min_flops = max(min_flops, min_flops_beyond_two)
    if world_size == 1 or device.type != "cuda" or dtype not in GPU_FUSED_DTYPES or flops < min_flops:
        return _RULE["sequential"]
    return _RULE["fused"] if fused_supported(device, dtype) else _RULE["decomposed"]


def candidates(device: torch.device, fused: bool, configs: Sequence[GemmConfig] = GPU_CONFIGS) -> list[Choice]:
    """What a measurement times, in order of preference. ``configs``: the kernel configs the call's
    fused path can run, each a candidate of its own on CUDA (none: its fused path runs no GEMM kernel
    of ours, one fused candidate).

    Decomposed comes last, so that a tie between it and fused goes to fused: its calls issue a
    collective and a GEMM per chunk, three to six times a fused call's host time on 2xH200, and its
    collectives hold SMs beside the GEMMs, so a tie in ``auto``'s eager rounds can be a loss where
    the host or the SMs are busier. Measured on 2xH200: a decoder stack whose ``auto`` had taken
    decomposed for AG-GEMM 2048x8192->28672 ran its prefill 2-3.5% slower than with fused, where
    fused was 2.5-4% ahead of decomposed in later measurements of that call (BENCHMARKS.md)."""
    out = [Choice("sequential", source="measured")]
    if fused:
        timed = configs if device.type == "cuda" and configs else (None,)
        out += [Choice("fused", c, source="measured") for c in timed]
    return out + [Choice("decomposed", source="measured")]


# ---- the decision ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _order_rank(n: int) -> int | None:
    """The least ``j`` with ``P(Binomial(n, 1/2) >= j) <= 1 - CONFIDENCE``: then the ``j``-th smallest
    of ``n`` samples is above their population's median with probability at least
    :data:`CONFIDENCE`, whatever the distribution. ``None`` when even the largest is not (n < 5)."""
    rank, tail = None, 0.0
    for j in range(n, 0, -1):
        tail += math.comb(n, j) / 2**n
        if tail > 1 - CONFIDENCE:
            break
        rank = j
    return rank


def ratio_bounds(ratios: Sequence[float]) -> tuple[float, float, float]:
    """``(low, median, high)`` of paired per-round ratios (NaN ones left out): their median and
    distribution-free bounds of the median of their population, each at :data:`CONFIDENCE` (order
    statistics, :func:`_order_rank`); ``(-inf, median, inf)`` when there are too few for bounds."""
    x = sorted(r for r in ratios if not math.isnan(r))
    if not x:
        return -math.inf, math.nan, math.inf
    j = _order_rank(len(x))
    median = statistics.median(x)
    return (-math.inf, median, math.inf) if j is None else (x[len(x) - j], median, x[j - 1])


def paired_bounds(times: Sequence[float], base: Sequence[float]) -> tuple[float, float, float]:
    """:func:`ratio_bounds` of ``times`` over ``base`` paired round by round (``times[i] / base[i]``)."""
    return ratio_bounds([t / b for t, b in zip(times, base)])


@dataclass(frozen=True)
class Verdict:
    """What :func:`decide` makes of the samples: the label chosen for each mode; ``open``, the
    candidates whose standing more rounds could still change (empty: settled); and ``ratios``, each
    candidate's ``(low, median, high)`` ratio to the baseline per mode of :data:`MEASURED_MODES`, and
    :data:`EAGER` and :data:`HOST` where measured."""

    throughput: str
    latency: str
    both: str
    open: tuple[str, ...]
    ratios: dict[str, dict[str, tuple[float, float, float]]]


def _settled_least_worst(labels: list[str], samples: dict[str, dict[str, Sequence[float]]],
                         ratios: dict[str, dict[str, tuple[float, float, float]]], modes: Sequence[str],
                         final: bool = False) -> str:
    """The ``both`` choice among ``labels`` (by preference): the one whose worst slowdown over
    ``modes``, against the best median of ``labels`` in each, is least. The first, given up for a
    later one only where their paired per-round ratios settle it at :data:`CONFIDENCE`: the later
    one is faster than the pick by more than :data:`TIE_MARGIN` in a mode where the pick is slower
    than the best by more than that, and in no mode is its slowdown (the pick's times the high
    bound of their ratio) above the pick's worst. Medians alone would trade configs on noise.
    ``final`` (no more rounds to come): a paired ratio whose high bound is within :data:`MAX_LOSS`
    is read at its median."""
    best = {m: min(ratios[c][m][1] for c in labels) for m in modes}

    def slowdown(label: str) -> dict[str, float]:
        return {m: ratios[label][m][1] / best[m] for m in modes}

    def paired(label: str, pick: str, m: str) -> float:
        _, median, high = paired_bounds(samples[label][m], samples[pick][m])
        return median if final and high <= 1 + MAX_LOSS else high

    pick = labels[0]
    for label in labels[1:]:
        own = slowdown(pick)
        worst = max(own.values())
        high = {m: paired(label, pick, m) for m in modes}
        faster = any(high[m] < 1 - TIE_MARGIN and own[m] > 1 + TIE_MARGIN for m in modes)
        if faster and all(high[m] * own[m] <= worst for m in modes):
            pick = label
    return pick


def _settled_best(labels: list[str], samples: dict[str, dict[str, Sequence[float]]], mode: str) -> str:
    """The first of ``labels`` (by preference), given up for a later one only where that one is
    faster than it by more than :data:`TIE_MARGIN` at :data:`CONFIDENCE` (the high bound of their
    paired per-round ratios in ``mode``). Medians alone would pick among configs that differ by
    noise: in latency mode, where one reading moves by tens of microseconds, that was a different
    config from round to round of measurements."""
    pick = labels[0]
    for label in labels[1:]:
        if _paired_high(samples, label, pick, mode) < 1 - TIE_MARGIN:
            pick = label
    return pick


def _paired_high(samples: dict[str, dict[str, Sequence[float]]], label: str, pick: str, mode: str) -> float:
    """The high :data:`CONFIDENCE` bound of ``label``'s per-round time over ``pick``'s in ``mode``."""
    return paired_bounds(samples[label][mode], samples[pick][mode])[2]


def decide(samples: dict[str, dict[str, Sequence[float]]], order: Sequence[str], final: bool = False) -> Verdict:
    """The rule of the module docstring, on ``samples``: ``{label: {mode: [ms of each round]}}`` for
    the modes of :data:`MEASURED_MODES` and, where measured, :data:`EAGER` and :data:`HOST`, every
    list one entry per round (NaN where the candidate was not timed that round). ``order``: the labels by preference;
    the first one in ``samples`` (sequential) is the baseline. ``final``: no more rounds will be
    timed, so a reading whose bounds still straddle a threshold is decided by its median within
    the loss bound. The same samples give the same verdict on every rank."""
    labels = [label for label in order if label in samples]
    base, rest = labels[0], labels[1:]
    # the host time and eager throughput where they were measured
    timed = [m for m in (*MEASURED_MODES, EAGER, HOST) if samples[base].get(m)]
    both_modes = (EAGER if EAGER in timed else "throughput", "latency")
    modes = [m for m in (*MEASURED_MODES, EAGER) if m in timed]  # the readings that decide
    ratios = {base: {m: (1.0, 1.0, 1.0) for m in timed}}
    for label in rest:
        ratios[label] = {m: paired_bounds(samples[label][m], samples[base][m]) for m in timed}
    win_at, safe_at = 1 - TIE_MARGIN, 1 + MAX_LOSS

    def wins_in(low_median_high: tuple[float, float, float]) -> bool:
        _, median, high = low_median_high
        return high < win_at or (final and median < win_at and high <= safe_at)

    def safe_in(low_median_high: tuple[float, float, float]) -> bool:
        _, median, high = low_median_high
        return high <= safe_at or (final and median <= 1)

    wins = {label: {m: wins_in(ratios[label][m]) for m in modes} for label in rest}
    safe = {label: all(safe_in(ratios[label][m]) for m in both_modes) for label in rest}
    chosen = {}
    for m in MEASURED_MODES:
        winners = [label for label in rest if wins[label][m]]
        chosen[m] = _settled_best(winners, samples, m) if winners else base
    if chosen["latency"] == base and HOST in timed:  # a latency tie: the smaller host time
        ties = [label for label in rest if ratios[label]["latency"][1] <= 1 and ratios[label][HOST][2] < win_at]
        if ties:
            chosen["latency"] = min(ties, key=lambda label: ratios[label][HOST][1])
    both = [base] + [label for label in rest if safe[label] and any(wins[label][m] for m in both_modes)]
    chosen["both"] = _settled_least_worst(both, samples, ratios, both_modes, final)

    def unsettled(label: str) -> bool:
        r = [ratios[label][m] for m in modes]
        win_open = any(lo < win_at <= hi for lo, _, hi in r)
        could_win = any(lo < win_at for lo, _, _ in r)
        safety_open = any(lo <= safe_at < hi for lo, _, hi in (ratios[label][m] for m in both_modes))
        return win_open or (could_win and safety_open)

    return Verdict(chosen["throughput"], chosen["latency"], chosen["both"],
                   tuple(label for label in rest if unsettled(label)), ratios)


def measure_until_settled(timer: Timer, sample: Callable[[list[str], int, int], dict], labels: Sequence[str],
                          rounds: Rounds) -> tuple[Verdict, dict[str, dict[str, list[float]]]]:
    """Rounds of ``sample`` until :func:`decide` is settled or ``rounds.most`` rounds have run (then
    its ``final`` verdict): ``rounds.first``, then ``rounds.more`` at a time of the baseline
    (``labels[0]``) and the open candidates. ``sample(timed, n, first_round)`` gives this rank's ``{label: {mode: [ms]}}`` of ``n``
    rounds of the labels ``timed`` (every rank times the same ones), for the modes of
    :data:`MEASURED_MODES` and, if it measures them, :data:`EAGER` and :data:`HOST`; each reading is
    reduced over the ranks (max), so every rank decides on the same figures. Returns the verdict and the samples
    (:func:`decide`'s form)."""
    timed, done = list(labels), 0
    while True:
        n = rounds.first if done == 0 else min(rounds.more, rounds.most - done)
        local = sample(timed, n, done)
        if done == 0:  # eager throughput and the host time too, where the sample has them
            modes = [m for m in (*MEASURED_MODES, EAGER, HOST) if m in local[timed[0]]]
            samples = {label: {m: [] for m in modes} for label in labels}
        reduced = per_round(timer, local, timed, modes)
        for label in labels:
            for m in modes:
                samples[label][m] += reduced[label][m] if label in timed else [math.nan] * n
        done += n
        verdict = decide(samples, labels)
        if not verdict.open:
            return verdict, samples
        if done >= rounds.most:
            return decide(samples, labels, final=True), samples
        timed = [labels[0], *verdict.open]


# ---- the cache: memory and disk ------------------------------------------------------------------

class _Memory(dict):
    """``{Key: Choices}``: the choices made in this process. A :class:`Choice` stored is taken for
    every mode. ``fused``: the keys whose choices include fused."""

    def __init__(self) -> None:
        super().__init__()
        self.fused: set[Key] = set()
        self.generation = 0  # goes up on every change: what eager_choice_of remembered may be stale

    def __setitem__(self, key: Key, value: Choices | Choice) -> None:
        value = Choices.same(value) if isinstance(value, Choice) else value
        super().__setitem__(key, value)
        self.generation += 1
        if value.fused:
            self.fused.add(key)
        else:
            self.fused.discard(key)

    def clear(self) -> None:
        super().clear()
        self.generation += 1
        self.fused.clear()


class _State:
    """This process's dispatch caches, in one place (:func:`clear_memory` empties them)."""

    def __init__(self) -> None:
        self.memory = _Memory()  # Key -> Choices
        self.disk: dict[Path, dict] = {}  # cache file -> its entries as read
        self.keys: dict[tuple, Key] = {}  # call signature -> Key (Key.of)
        self.eager: dict = {}  # an op's repeat signature -> (stamp, (choice, key), asks capture) (eager_choice_of)
        self.mode: str | None = None  # FLUXLITE_AUTO_MODE as read ("" if unset), None before
        self.auto: str | None = None  # FLUXLITE_AUTO as read, None before

    def auto_mode(self) -> str:
        """:func:`auto_mode`, read on first use."""
        if self.auto is None:
            self.auto = auto_mode()
        return self.auto

    def env_mode(self) -> str:
        """``FLUXLITE_AUTO_MODE`` (``""`` when unset), read on first use."""
        if self.mode is None:
            value = os.environ.get("FLUXLITE_AUTO_MODE", "")
            self.mode = value and _check_mode(value, "FLUXLITE_AUTO_MODE")
        return self.mode

    def clear(self) -> None:
        self.memory.clear()
        self.disk.clear()
        self.keys.clear()
        self.eager.clear()
        self.mode = self.auto = None


PROCESS.dispatch = _STATE = _State()  # this process's dispatch caches (fluxlite.process)
_MEMORY = _STATE.memory
_TUNING: contextvars.ContextVar[set | None] = contextvars.ContextVar("fluxlite_tuning", default=None)


def cache_dir() -> Path:
    if os.environ.get("FLUXLITE_CACHE_DIR"):
        return Path(os.environ["FLUXLITE_CACHE_DIR"])
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("fluxlite"))
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fluxlite"


def cache_path() -> Path:
    return cache_dir() / "dispatch.json"


def _choice_from(entry, source: str) -> Choice | None:
    """One choice of a cache entry, or ``None`` when it is not one this version could have written."""
    if not isinstance(entry, dict) or entry.get("impl") not in MEASURED_IMPLS:
        return None
    config = entry.get("config")
    if config is None:
        return Choice(entry["impl"], None, source)
    if entry["impl"] != "fused" or not isinstance(config, dict):
        return None
    try:
        config = GemmConfig(**config)
    except TypeError:
        return None
    return Choice("fused", config, source) if config in GPU_CONFIGS else None


def _choices_from(entry, source: str) -> Choices | None:
    """A cache entry's choices (:meth:`Choices.to_json`), or ``None`` when it is not one this version
    could have written."""
    modes = entry.get("modes") if isinstance(entry, dict) else None
    if not isinstance(modes, dict):
        return None
    each = [_choice_from(modes.get(m), source) for m in MEASURED_MODES] + [_choice_from(entry, source)]
    return None if None in each else Choices.of(*each)


def load_cache(path: Path, *, warn: bool = True) -> dict[str, dict]:
    """The entries of the cache file at ``path`` (``{}`` if it does not exist). A corrupt or foreign
    file, and foreign entries, are ignored with a warning."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        why = f"cannot be read ({exc})"
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            data, why = None, f"is not JSON ({exc})"
        else:
            why = f"is not a {CACHE_SCHEMA} file"
        if isinstance(data, dict) and data.get("schema") == CACHE_SCHEMA and isinstance(data.get("entries"), dict):
            good = {k: e for k, e in data["entries"].items() if _choices_from(e, "cache") is not None}
            if warn and len(good) < len(data["entries"]):
                warnings.warn(f"fluxlite: ignoring {len(data['entries']) - len(good)} foreign entries of the "
                              f"dispatch cache {path}", RuntimeWarning, stacklevel=2)
            return good
    if warn:
        warnings.warn(f"fluxlite: ignoring the dispatch cache {path}: it {why}", RuntimeWarning, stacklevel=2)
    return {}


def _disk_entries(path: Path) -> dict[str, dict]:
    if path not in _STATE.disk:
        _STATE.disk[path] = load_cache(path)
    return _STATE.disk[path]


def _store(key: Key, choices: Choices, record: dict) -> None:
    """Add ``key``'s choices and the ``record`` of their measurement to the cache file (merged with
    what other processes wrote meanwhile)."""
    path = cache_path()
    entries = load_cache(path, warn=False)
    entries[key.text] = dict(choices.to_json(), **record,
                             measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    _STATE.disk[path] = entries
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(schema=CACHE_SCHEMA, entries=entries), indent=1, sort_keys=True))
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    except OSError as exc:
        warnings.warn(f"fluxlite: could not write the dispatch cache {path}: {exc}", RuntimeWarning, stacklevel=2)


def clear_memory() -> None:
    """Forget the choices made in this process and what it read (the cache file stays;
    ``FLUXLITE_AUTO`` and ``FLUXLITE_AUTO_MODE`` are read again)."""
    _STATE.clear()


@contextlib.contextmanager
def tuning():
    """Inside, ``auto`` measures each key it meets once (on any device, even when cached) and
    overwrites the cache. Every rank must enter it around the same calls."""
    token = _TUNING.set(set())
    try:
        yield
    finally:
        _TUNING.reset(token)


def remembered(key: Key) -> Choice | None:
    """The choice :func:`choose` returns for ``key`` now without measuring or agreeing (this process's,
    for the mode of a call made now), or ``None`` when it would decide afresh (not chosen yet,
    cleared, or a :func:`tuning` block that will measure it again)."""
    tuned = _TUNING.get()
    if tuned is not None and key not in tuned:
        return None
    known = _MEMORY.get(key)
    if known is None:
        return None
    return known.for_call(key.torch_device)


def describe(key: Key, flops: float, device: torch.device, dtype: torch.dtype,
             min_flops_beyond_two: float = 0.0) -> Choice:
    """The choice ``auto`` makes for ``key`` now, without measuring: this process's, else the rule
    (``min_flops_beyond_two``: the op's, :func:`rule`)."""
    known = _MEMORY.get(key)
    if known is not None:
        return known.for_call(device)
    return rule(key.world_size, flops, device, dtype, key.rows, min_flops_beyond_two)


def describe_modes(key: Key) -> dict[str, Choice] | None:
    """This process's choice for ``key`` in each measured mode (``throughput``, ``latency``), or
    ``None`` where it has none (the rule decides alike in every mode)."""
    known = _MEMORY.get(key)
    return None if known is None else {m: getattr(known, m) for m in MEASURED_MODES}


# ---- choosing ------------------------------------------------------------------------------------

EXPLICIT = {impl: Choice(impl, source="explicit") for impl in MEASURED_IMPLS}
"""The choice of a call that names its implementation."""


def choose(key: Key, tp: TPGroup, a: torch.Tensor, flops: float, run: Callable[[Choice], object],
           timeout_s: float, configs: Callable[[], Sequence[GemmConfig]] = lambda: GPU_CONFIGS,
           min_flops_beyond_two: float = 0.0) -> Choice:
    """What ``impl="auto"`` runs for a call (see the module docstring). ``run(choice)`` calls the op
    on this call's operands with that choice (used to measure); ``flops``: the GEMM's per rank;
    ``configs()``: the kernel configs its fused path can run (:func:`candidates`), asked only
    when the call is measured; ``min_flops_beyond_two``: the op's, where the rule decides (:func:`rule`)."""
    if key.world_size == 1 or a.shape[0] == 0:
        return _RULE["sequential"]
    tuned = _TUNING.get()
    retune = tuned is not None and key not in tuned
    if not retune:
        known = _MEMORY.get(key)
        if known is not None:
            return known.both if known.uniform else _mode_choice(known, a)
        if _rule_decides(a):
            return rule(key.world_size, flops, a.device, a.dtype, key.rows, min_flops_beyond_two)
    if _workspace.capturing(a.device):
        return describe(key, flops, a.device, a.dtype, min_flops_beyond_two)
    choices = _agree(key, tp, a, run, timeout_s, retune, configs)
    if tuned is not None:
        tuned.add(key)
    return _mode_choice(choices, a)


def _rule_decides(a: torch.Tensor) -> bool:
    """Whether :func:`rule` decides a call on ``a`` whose key is not in memory: ``FLUXLITE_AUTO=off``,
    or ``on`` off CUDA (no measuring)."""
    mode = _STATE.auto_mode()
    return mode == "off" or (mode == "on" and a.device.type != "cuda")


def ruled_choice(key: Key | None, a: torch.Tensor, flops: float, min_flops_beyond_two: float = 0.0) -> Choice | None:
    """What :func:`choose` returns for a call on ``a`` without measuring, agreeing or consulting its
    memory: sequential for one rank (``key`` ``None``) or no rows, and :func:`rule`'s answer
    (``flops``, ``min_flops_beyond_two`` as :func:`choose` takes them) where the rule decides a key
    that is not in memory (:func:`_rule_decides`); ``None`` where :func:`choose` would do more (a
    key in memory: :func:`eager_choice`; a key to measure; a :func:`tuning` block). A function of
    the call's shapes, device and dtype and the environment as read, so a repeated call may keep it."""
    if _TUNING.get() is not None:
        return None
    if key is None or key.world_size == 1 or a.shape[0] == 0:
        return _RULE["sequential"]
    if _MEMORY.get(key) is not None or not _rule_decides(a):
        return None
    return rule(key.world_size, flops, a.device, a.dtype, key.rows, min_flops_beyond_two)


def eager_choice(key: Key, a: torch.Tensor) -> Choice | None:
    """What :func:`choose` returns for an eager call of ``key`` on ``a`` when it would neither measure
    nor agree (the key is remembered and no :func:`tuning` block will measure it again), with the same
    warm mark; ``None`` where :func:`choose` must run (first sight, a CUDA-graph capture, no rows).
    Dictionary look-ups and at most one capture query: what a repeated ``auto`` call costs beyond its
    implementation. The capture query is made only where the answer depends on it (:func:`_asks_capture`);
    where it does not, a captured call gets the same answer as :func:`choose` would give it."""
    tuned = _TUNING.get()
    known = _MEMORY.get(key)
    if known is None or (tuned is not None and key not in tuned) or a.shape[0] == 0:
        return None
    declared = _declared_mode()
    choice = getattr(known, declared or "throughput")
    if known.uniform or choice is known.both:
        return known.both  # what the call runs whether it is captured or not: no capture query
    if declared and (a.shape[0], id(choice)) in known.warm:
        return choice  # a captured call takes a warm choice of its declared mode too: no capture query
    capturing = _workspace.capturing(a.device)
    return None if capturing else _mode_choice(known, a, capturing)


def _asks_capture(known: Choices) -> bool:
    """Whether a repeated eager call's choice among ``known`` may differ when it is captured: where
    no mode is declared and the throughput choice (a capture's) is not ``both`` (an eager call's).
    In a declared mode both run the mode's choice, once an eager call made it warm for its rows
    (:func:`_mode_choice`), as the call that :func:`eager_choice_of` remembers did."""
    return not (known.uniform or known.throughput is known.both or _declared_mode())


def repeat_stamp() -> tuple[int, str] | None:
    """What the choice of a repeated eager ``auto`` call depends on besides its arguments: the
    generation of the choices in memory and the declared mode; ``None`` inside a :func:`tuning`
    block, where every key met is measured again. An op keeps a call's decisions under its
    arguments and this stamp (:meth:`fluxlite.ops.op.Op._repeat`)."""
    if _TUNING.get() is not None:
        return None
    return _MEMORY.generation, _declared_mode()


def depends_on_capture(key: Key) -> bool:
    """Whether a repeated eager call of ``key`` would run another choice if it were captured
    (:func:`_asks_capture`); ``False`` where nothing is remembered for ``key``."""
    known = _MEMORY.get(key)
    return known is not None and _asks_capture(known)


MAX_EAGER = 4096
"""Signatures :func:`eager_choice_of` remembers; past this it starts again."""


def eager_choice_of(signature: tuple, key_of: Callable[[], Key | None], a: torch.Tensor,
                    ruled: Callable[[Key | None], Choice | None] | None = None) -> tuple[Choice, Key | None] | None:
    """``(choice, key)`` of :func:`eager_choice` for the key ``key_of()`` of an op's call, remembered
    per ``signature`` (hashable; one signature always gives one key, so it must hold everything the
    key is made of), or ``None`` where :func:`eager_choice` is. What a repeated ``auto`` call asks
    of dispatch: one look-up, while the choices, the declared mode and any :func:`tuning` block are
    as they were, plus the capture query where the choice depends on it. ``key_of()`` may be
    ``None`` (nothing to choose: one rank). Where :func:`eager_choice` has nothing, ``ruled(key)``
    (:func:`ruled_choice` for the call) may answer: ``(its choice, None)``, remembered alike; no key,
    since nothing in memory stands behind it."""
    stamp = (_MEMORY.generation, _declared_mode())
    entry = _STATE.eager.get(signature)
    if entry is not None and entry[0] == stamp and _TUNING.get() is None:
        if not entry[2] or not _workspace.capturing(a.device):
            return entry[1]
    if not _MEMORY and ruled is None:  # nothing remembered: every auto call goes through choose()
        return None
    key = key_of()
    choice = None if key is None else eager_choice(key, a)
    asks = choice is not None and _asks_capture(_MEMORY[key])
    if choice is None:
        choice, key = None if ruled is None else ruled(key), None
        if choice is None:
            return None
    known = (choice, key)
    if _TUNING.get() is None:
        if len(_STATE.eager) >= MAX_EAGER:
            _STATE.eager.clear()
        _STATE.eager[signature] = (stamp, known, asks)
    return known


def _mode_choice(choices: Choices, a: torch.Tensor, capturing: bool | None = None) -> Choice:
    """The choice of the call's mode. An eager call marks it warm for its rows. A captured call takes
    it only if it is warm, else ``both`` (what an eager warm-up of the call ran): a fused call that
    never ran eagerly with its shape cannot be captured, and a mode's choice may be one the warm-up
    did not run (the warm-up made outside the capture's mode, or the choices read from the cache).
    ``capturing``: the capture state, where the caller has read it."""
    if capturing is None:
        capturing = _workspace.capturing(a.device)
    choice = getattr(choices, _mode_of(capturing))
    if choice is choices.both:
        return choice
    if not capturing:
        choices.warm.add((a.shape[0], id(choice)))
        return choice
    return choice if (a.shape[0], id(choice)) in choices.warm else choices.both


def _agree(key: Key, tp: TPGroup, a: torch.Tensor, run, timeout_s: float, retune: bool,
           configs: Callable[[], Sequence[GemmConfig]]) -> Choices:
    """The agreement step of a first sight (module docstring); every rank returns the same choices."""
    n = next(PROCESS.agreement_rounds.setdefault(tp.name, itertools.count()))  # store keys: never reset
    cached = None if retune else _choices_from(_disk_entries(cache_path()).get(key.text), "cache")
    mine = dict(key=key.text, cached=None if cached is None else cached.to_json(),
                fused=fused_supported(a.device, a.dtype), host=socket.gethostname())
    peers = [json.loads(s) for s in rendezvous.all_gather_str(
        tp, f"dispatch/{n}", json.dumps(mine, sort_keys=True), timeout_s=timeout_s, op="auto dispatch",
        step="agree on the implementation")]
    for p, theirs in enumerate(peers):
        if theirs["key"] != key.text:
            raise FluxliteCallMismatchError(rank=tp.rank, peer=p, mine=f"auto {key.text}", theirs=f"auto {theirs['key']}")
    fused_ok = all(p["fused"] for p in peers) and len({p["host"] for p in peers}) == 1
    same = {json.dumps(p["cached"], sort_keys=True) for p in peers}
    choices = _choices_from(peers[0]["cached"], "cache") if len(same) == 1 else None
    if choices is not None and not _runnable(choices, fused_ok, configs):
        choices = None  # a cache written by other code (say, a config this op's kernel no longer holds)
    if choices is None:
        choices, record = _measure(key, tp, a, run, fused_ok, configs())
        choices.warm.update((a.shape[0], id(getattr(choices, m))) for m in CALL_MODES)  # every candidate ran
        _store(key, choices, record)
    _MEMORY[key] = choices
    return choices


def _runnable(choices: Choices, fused_ok: bool, configs: Callable[[], Sequence[GemmConfig]]) -> bool:
    """Whether every mode's choice can run here: fused only where every rank has a workspace, and
    only with a config the op's kernel holds."""
    fused = [c for c in (getattr(choices, m) for m in CALL_MODES) if c.impl == "fused"]
    if not fused:
        return True
    held = configs()
    return fused_ok and all(c.config is None or c.config in held for c in fused)


def _timer(tp: TPGroup, device: torch.device) -> Timer:
    timer = PROCESS.dispatch_timers.get((tp.name, str(device)))
    if timer is None or timer.tp.group is not tp.group:
        timer = PROCESS.dispatch_timers[(tp.name, str(device))] = Timer(tp, device)
    return timer


def _measure(key: Key, tp: TPGroup, a: torch.Tensor, run, fused_ok: bool,
             configs: Sequence[GemmConfig]) -> tuple[Choices, dict]:
    """Time every candidate on every rank together (:func:`measure_until_settled`); the choices and
    the record of the measurement for the cache file: the rounds, each candidate's median ms and its
    ``[low, median, high]`` ratio to the baseline, per mode."""
    options = {c.label: c for c in candidates(a.device, fused_ok, configs)}
    fns = {label: (lambda _x, c=c: run(c)) for label, c in options.items()}
    timer = _timer(tp, a.device)
    _, failed = run_each_once(timer, fns, None)
    if not fns:
        raise FluxliteError(f"fluxlite auto: every implementation failed for {key.text}: {failed}")
    r = _MEASURE["cuda" if timer.cuda else "cpu"]
    state: dict = {}

    def sample(timed: list[str], n: int, first_round: int) -> dict:
        local, state["batch"] = time_samples(timer, {label: fns[label] for label in timed}, [None], rounds=n,
                                             warmup=r.warmup, batch_ms=r.batch_ms, max_batch=r.max_batch,
                                             min_sleep_ms=5.0, batch=state.get("batch"), first_round=first_round)
        return local

    verdict, samples = measure_until_settled(timer, sample, list(fns), r)
    record = dict(
        rounds=len(samples[next(iter(samples))]["throughput"]), confidence=CONFIDENCE,
        times_ms={label: {m: statistics.median(v for v in s[m] if not math.isnan(v)) for m in s}
                  for label, s in samples.items()},
        vs_baseline={label: {m: list(b) for m, b in by_mode.items()} for label, by_mode in verdict.ratios.items()},
        failed=failed)
    return Choices.of(*(options[label] for label in (verdict.throughput, verdict.latency, verdict.both))), record
