"""Measured dispatch: the implementation and kernel config that ``impl="auto"`` runs, per shape.

What is chosen
--------------
For each :class:`Key` (op, M bucket, K, N, dtype, world size, device name, fluxlite version) one
:class:`Choice`: ``"sequential"``, ``"decomposed"``, or ``"fused"`` with a
:class:`~fluxlite.kernels.gemm_core.GemmConfig` from :data:`GPU_CONFIGS`. M is bucketed
geometrically, :data:`M_BUCKETS_PER_OCTAVE` buckets per doubling (about 9% apart), so one
measurement serves the neighbouring token counts.

When a key is first seen in a process
-------------------------------------
All ranks take one agreement step together, through the process group's store (bounded by
fluxlite's timeout, :mod:`fluxlite.rendezvous`): each publishes the key, the choice its cache file
holds for it (if any), whether it can build a workspace, and its host. Ranks whose keys differ raise
:class:`~fluxlite.errors.FluxliteCallMismatchError`. If every rank's file holds the same choice, that
is used. Otherwise all ranks measure every candidate together (:mod:`fluxlite.timing`: the
same calls on every rank, medians over rounds, the max over ranks), so every rank computes the same
winner from the same figures and they can never disagree. The winner is kept in memory and written
to the cache file. A rank with a cache file and a rank without one therefore still take the same
step; the measuring ranks only run the op itself, whose waits are bounded as every call's are.

The winner is never slower than sequential by more than :data:`MAX_LOSS` in either throughput or
latency mode: a candidate that would be is out (so a fused call that wins latency but loses
throughput, as on small shapes, is not chosen). Among the rest it minimises the worst slowdown
against the best candidate over both modes (``max(t_tp / best_tp, t_lat / best_lat)``); a candidate
listed earlier (sequential, then decomposed, then fused with the default config first) wins within
:data:`TIE_MARGIN` of that.

Switches (environment)
----------------------
- ``FLUXLITE_AUTO=on`` (default): measure on CUDA; on CPU use :func:`rule` (the fused protocol on
  CPU ranks exercises the protocol, it is not a fast path). ``off``: :func:`rule` everywhere, no
  measuring, no agreement step. ``measure``: measure on CPU too (tests, CPU tuning).
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
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from . import rendezvous
from . import workspace as _workspace
from .errors import FluxliteCallMismatchError, FluxliteError
from .group import TPGroup
from .kernels.gemm_core import GemmConfig

RULE_MIN_FLOPS = 5e11
"""The rule takes the fused path on GPU from the smallest GEMM measured to win on 2xH200 (AG
8192x8192->5120 at TP=2: 6.9e11 FLOPs per rank, 1.23x over sequential; BENCHMARKS.md). Below it the
fused call's fixed host cost is not known to be hidden."""
_GPU_FUSED_DTYPES = (torch.bfloat16, torch.float16)

M_BUCKETS_PER_OCTAVE = 8
TIE_MARGIN = 0.01
MAX_LOSS = 0.02
"""The most the chosen implementation may be slower than sequential, in either mode (issue 10's bound)."""
CACHE_SCHEMA = "fluxlite-dispatch/2"  # 2: winners bounded by MAX_LOSS; a /1 file's may lose more to sequential
MEASURED_IMPLS = ("sequential", "decomposed", "fused")

GPU_CONFIGS: tuple[GemmConfig, ...] = (
    GemmConfig(),  # 128x256x64, 8 warps, 3 stages, GROUP_M 8: the default (ANCHORS.md: 98-105% of cuBLAS)
    GemmConfig(group_m=16),  # a wider L2 swizzle: won on two RS shapes in the GEMM sweep (BENCHMARKS.md)
    GemmConfig(num_stages=4),  # one more stage in flight (196 KB of shared memory on sm_90)
    GemmConfig(block_n=128, num_stages=4),  # small N or few tiles: twice the tiles to spread over the SMs
    GemmConfig(block_m=256, block_n=128),  # tall tiles: fewer B reloads where N is short
)
"""The kernel configs measured for fused on CUDA, the default first. All fit an H100/H200 block's
shared memory (tests/test_dispatch.py compiles them for sm_90). They may differ in ``block_m``:
splits are part of the cross-rank protocol, and the agreement makes every rank use the same one."""

# (rounds, warm-up calls, throughput batch ms, most calls per batch) of a call-time measurement.
_MEASURE = {"cuda": (5, 2, 5.0, 10), "cpu": (2, 1, 2.0, 2)}


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
        """``op``: ``"ag_gemm"``, ``"ag_gemm+gathered"`` (``return_gathered``) or ``"gemm_rs"``;
        ``a: [rows per rank, K]``, ``weight: [N, K]``."""
        return cls(op, m_bucket(rows), a.shape[1], weight.shape[0], str(a.dtype).replace("torch.", ""),
                   tp.world_size, device_name(a.device), _version())

    @property
    def text(self) -> str:
        lo, hi = bucket_rows(self.m_bucket)
        return (f"{self.op} M={lo}-{hi} K={self.K} N={self.N} {self.dtype} W={self.world_size} "
                f"{self.device} fluxlite-{self.version}")


def m_bucket(rows: int) -> int:
    return round(M_BUCKETS_PER_OCTAVE * math.log2(max(rows, 1)))


def bucket_rows(bucket: int) -> tuple[int, int]:
    """The row counts ``[lo, hi]`` that fall into ``bucket``."""
    lo = math.ceil(2 ** ((bucket - 0.5) / M_BUCKETS_PER_OCTAVE))
    hi = math.ceil(2 ** ((bucket + 0.5) / M_BUCKETS_PER_OCTAVE)) - 1
    return max(lo, 1), max(hi, 1)


@lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    return f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def _version() -> str:
    return getattr(sys.modules.get("fluxlite"), "__version__", "unknown")


def auto_mode() -> str:
    mode = os.environ.get("FLUXLITE_AUTO", "on")
    if mode not in ("on", "off", "measure"):
        raise ValueError(f"FLUXLITE_AUTO must be 'on', 'off' or 'measure', got {mode!r}")
    return mode


def fused_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this rank can run fused for ``dtype`` on ``device`` (ignoring its peers)."""
    if os.environ.get("FLUXLITE_WORKSPACE", "on") == "off":
        return False
    if device.type != "cuda":
        return True
    if dtype not in _GPU_FUSED_DTYPES:
        return False
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError:
        return False
    return True


def rule(world_size: int, flops: float, device: torch.device, dtype: torch.dtype) -> Choice:
    """The documented rule: sequential on CPU, for a world of one and for GEMMs under
    :data:`RULE_MIN_FLOPS` per rank (``flops``); above it on GPU (bf16/fp16) fused, or decomposed
    where the workspace is unavailable."""
    if world_size == 1 or device.type != "cuda" or dtype not in _GPU_FUSED_DTYPES or flops < RULE_MIN_FLOPS:
        return Choice("sequential")
    return Choice("fused") if fused_supported(device, dtype) else Choice("decomposed")


def candidates(device: torch.device, fused: bool) -> list[Choice]:
    """What a measurement times, in order of preference."""
    out = [Choice("sequential", source="measured"), Choice("decomposed", source="measured")]
    if fused:
        configs = GPU_CONFIGS if device.type == "cuda" else (None,)
        out += [Choice("fused", c, source="measured") for c in configs]
    return out


# ---- the cache: memory and disk ------------------------------------------------------------------

_MEMORY: dict[Key, Choice] = {}
_DISK: dict[Path, dict] = {}
_TUNING: contextvars.ContextVar[set | None] = contextvars.ContextVar("fluxlite_tuning", default=None)
_ROUNDS: dict[str, itertools.count] = {}
_TIMERS: dict = {}


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
    """A cache entry's choice, or ``None`` when it is not one this version could have written."""
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
            good = {k: e for k, e in data["entries"].items() if _choice_from(e, "cache") is not None}
            if warn and len(good) < len(data["entries"]):
                warnings.warn(f"fluxlite: ignoring {len(data['entries']) - len(good)} foreign entries of the "
                              f"dispatch cache {path}", RuntimeWarning, stacklevel=2)
            return good
    if warn:
        warnings.warn(f"fluxlite: ignoring the dispatch cache {path}: it {why}", RuntimeWarning, stacklevel=2)
    return {}


def _disk_entries(path: Path) -> dict[str, dict]:
    if path not in _DISK:
        _DISK[path] = load_cache(path)
    return _DISK[path]


def _store(key: Key, choice: Choice, times: dict) -> None:
    """Add ``key``'s choice to the cache file (merged with what other processes wrote meanwhile)."""
    path = cache_path()
    entries = load_cache(path, warn=False)
    entries[key.text] = dict(choice.to_json(), times_ms=times,
                             measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    _DISK[path] = entries
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(schema=CACHE_SCHEMA, entries=entries), indent=1, sort_keys=True))
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    except OSError as exc:
        warnings.warn(f"fluxlite: could not write the dispatch cache {path}: {exc}", RuntimeWarning, stacklevel=2)


def clear_memory() -> None:
    """Forget the choices made in this process (the cache file stays)."""
    _MEMORY.clear()
    _DISK.clear()


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
    """The choice :func:`choose` returns for ``key`` without measuring or agreeing (this process's),
    or ``None`` when it would decide afresh (not chosen yet, cleared, or a :func:`tuning` block that
    will measure it again)."""
    tuned = _TUNING.get()
    if tuned is not None and key not in tuned:
        return None
    return _MEMORY.get(key)


def describe(key: Key, flops: float, device: torch.device, dtype: torch.dtype) -> Choice:
    """The choice ``auto`` makes for ``key`` now, without measuring: this process's, else the rule."""
    return _MEMORY.get(key) or rule(key.world_size, flops, device, dtype)


# ---- choosing ------------------------------------------------------------------------------------

EXPLICIT = {impl: Choice(impl, source="explicit") for impl in MEASURED_IMPLS}
"""The choice of a call that names its implementation."""


def choose(key: Key, tp: TPGroup, a: torch.Tensor, flops: float, run: Callable[[Choice], object],
           timeout_s: float) -> Choice:
    """What ``impl="auto"`` runs for a call (see the module docstring). ``run(choice)`` calls the op
    on this call's operands with that choice (used to measure); ``flops``: the GEMM's per rank."""
    if key.world_size == 1 or a.shape[0] == 0:
        return Choice("sequential")
    tuned = _TUNING.get()
    retune = tuned is not None and key not in tuned
    if not retune:
        mode = auto_mode()
        if key in _MEMORY:
            return _MEMORY[key]
        if mode == "off" or (mode == "on" and a.device.type != "cuda"):
            return rule(key.world_size, flops, a.device, a.dtype)
    if _workspace.capturing(a.device):
        return describe(key, flops, a.device, a.dtype)
    choice = _agree(key, tp, a, run, timeout_s, retune)
    if tuned is not None:
        tuned.add(key)
    return choice


def _agree(key: Key, tp: TPGroup, a: torch.Tensor, run, timeout_s: float, retune: bool) -> Choice:
    """The agreement step of a first sight (module docstring); every rank returns the same choice."""
    n = next(_ROUNDS.setdefault(tp.name, itertools.count()))
    cached = None if retune else _choice_from(_disk_entries(cache_path()).get(key.text), "cache")
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
    choice = _choice_from(peers[0]["cached"], "cache") if len(same) == 1 else None
    if choice is None or (choice.impl == "fused" and not fused_ok):
        choice, times = _measure(key, tp, a, run, fused_ok)
        _store(key, choice, times)
    _MEMORY[key] = choice
    return choice


def _timer(tp: TPGroup, device: torch.device):
    from .timing import Timer

    timer = _TIMERS.get((tp.name, str(device)))
    if timer is None or timer.tp.group is not tp.group:
        timer = _TIMERS[(tp.name, str(device))] = Timer(tp, device)
    return timer


def pick(times: dict[str, dict[str, float]], order: list[str]) -> str:
    """The label of ``order`` with the least worst slowdown over throughput and latency mode (an
    earlier one wins within :data:`TIE_MARGIN`), among those no slower than ``"sequential"`` by more
    than :data:`MAX_LOSS` in either mode (all of them if sequential was not timed)."""
    modes = ("throughput", "latency")
    best = {m: min(t[m] for t in times.values()) for m in modes}
    regret = {n: max(t[m] / max(best[m], 1e-9) for m in modes) for n, t in times.items()}
    base = times.get("sequential")
    if base is not None:
        regret = {n: r for n, r in regret.items() if all(times[n][m] <= base[m] * (1 + MAX_LOSS) for m in modes)}
    low = min(regret.values())
    return next(n for n in order if n in regret and regret[n] <= low * (1 + TIE_MARGIN))


def _measure(key: Key, tp: TPGroup, a: torch.Tensor, run, fused_ok: bool) -> tuple[Choice, dict]:
    """Time every candidate on every rank together; the winner and ``{label: {mode: ms}}``."""
    from .timing import run_each_once, time_rounds

    options = {c.label: c for c in candidates(a.device, fused_ok)}
    fns = {label: (lambda _x, c=c: run(c)) for label, c in options.items()}
    timer = _timer(tp, a.device)
    _, failed = run_each_once(timer, fns, None)
    rounds, warmup, batch_ms, max_batch = _MEASURE["cuda" if timer.cuda else "cpu"]
    times, _ = time_rounds(timer, fns, [None], rounds=rounds, warmup=warmup, batch_ms=batch_ms, max_batch=max_batch,
                           min_sleep_ms=5.0)
    if not times:
        raise FluxliteError(f"fluxlite auto: every implementation failed for {key.text}: {failed}")
    best = pick(times, list(options))
    summary = {label: {m: t[m] for m in ("throughput", "latency")} for label, t in times.items()}
    return options[best], summary
