"""One way to time collective calls: the same rounds, modes and reductions for the profiler, the
measured dispatch (:mod:`fluxlite.dispatch`) and ``scripts/bench_ops.py``.

Modes, in milliseconds; :func:`time_rounds` gives each figure as the median over rounds, then the
max over ranks, :func:`time_samples` every round's reading on this rank (the measured dispatch
reduces them over the ranks round by round and compares them in pairs):

- ``throughput``: ``n`` calls back to back, the host queued ahead of the device (on CUDA behind a
  ``torch.cuda._sleep``), CUDA events around the batch, divided by ``n``. On CPU: wall clock. The
  ranks meet once more after the sleep, where the device is (a one-element all-reduce, outside the
  events): their sleeps start as far apart as their hosts leave the barrier, and without it the
  batch's first call would wait that long for the other ranks. A call that waits for its peers at
  its start (a replayed one-call graph's null call) took all of it, one that starts on local work
  part of it: on two H200s the first of 20 replays of one-call graphs took 1.4-4.9 ms where the
  rest took 1.22-1.24, and the batch read 1.13x the eager calls', whose steady calls were within
  0.5% of the replays'.
- ``latency``: the ranks aligned (a device sync and a barrier), one call, a sync: wall clock; the
  median of :data:`LATENCY_CALLS` such calls after an untimed one, as in a loop that waits for each
  call (the untimed call warms what the throughput batch before it may have left cold, e.g.
  ``auto``'s other choice).
  ``latency_event``: the same call by CUDA events (equal to ``latency`` on CPU).
- ``host``: the host time of one call, issued while the device sleeps, with no sync.
- ``enqueue``: the host time to issue a throughput batch; more than the sleep means the device
  waited on the host during that batch (CUDA).
- ``eager``: ``n`` calls back to back with nothing queued ahead of them (after an untimed one),
  CUDA events around them, divided by ``n``: where the host takes longer to issue a call than the
  device to run it, the device waits and the wait counts, as in an eager loop. Small calls are
  host-bound so: on 2×H200, sequential AG-GEMM with SwiGLU at 228 gathered rows ran 0.08 ms per
  call queued behind a sleep and 0.22 ms per call back to back. On CPU: wall clock.

Every round times every callable once in every mode, in an order that rotates from round to round,
so that clock and power drift hit them alike; inputs rotate over the sets given (so L2 does not
flatter a callable that re-reads the same operands). All ranks run the same number of calls of the
same callables in the same order: the batch size is agreed (max over ranks) before timing.
Collectives here (the barrier and the max over ranks) are the group's own, bounded by the process
group's timeout.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from .fused import release_workspaces, synchronize
from .group import TPGroup

MODES = ("throughput", "latency", "latency_event", "host", "enqueue", "eager")
LATENCY_CALLS = 3
"""Timed latency calls per callable and round (after an untimed one); the round's reading is their median."""


def meet(device: torch.device, group: dist.ProcessGroup | None = None) -> None:
    """Meet the other ranks of ``group`` after the work queued on ``device``: on CUDA over NCCL a
    one-element all-reduce on the current stream, whose end starts what follows at once on every
    rank, the host not synced; on CPU a barrier. Ranks that share a GPU over gloo skip it: gloo's
    all-reduce of a CUDA tensor waits on the host for the stream, and what follows would no longer
    be queued ahead of the device. Bounded by the group's timeout, as every collective here."""
    device = torch.device(device)
    if dist.get_world_size(group) > 1 and (device.type != "cuda" or dist.get_backend(group) == "nccl"):
        dist.all_reduce(torch.zeros(1, device=device), group=group)


class Timer:
    """Times callables on ``device`` for every rank of ``tp`` (see the module docstring)."""

    def __init__(self, tp: TPGroup, device: torch.device) -> None:
        self.tp, self.device = tp, torch.device(device)
        self.cuda = self.device.type == "cuda"
        # while a timed call runs: "throughput" (queued), "both" (eager, back to back) or "latency" (alone)
        self.mode: str | None = None
        self.cycles_per_ms = 0.0
        if self.cuda:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.align()
            torch.cuda._sleep(100_000_000)  # ~50 ms: the clocks up, then calibrate the sleep
            self.start.record()
            torch.cuda._sleep(20_000_000)
            self.end.record()
            torch.cuda.synchronize(self.device)
            self.cycles_per_ms = self.max_over_ranks([20_000_000 / self.start.elapsed_time(self.end)])[0]

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def max_over_ranks(self, values: Sequence[float]) -> list[float]:
        """Element-wise max over the ranks (NaN and inf pass through); the same list on every rank."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        if self.tp.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.tp.group)
        return t.tolist()

    def align(self) -> None:
        """Sync the device, meet the other ranks, sync again."""
        self.sync()
        if self.tp.world_size > 1:
            dist.all_reduce(torch.zeros(1, device=self.device), group=self.tp.group)
        self.sync()

    def _sleep(self, ms: float) -> None:
        if self.cuda and ms > 0:
            torch.cuda._sleep(int(ms * self.cycles_per_ms))

    def throughput(self, fn: Callable, inputs: Sequence, first: int, n: int, sleep_ms: float) -> tuple[float, float]:
        """(ms per call over ``n`` calls queued behind a sleep, host ms to issue them)."""
        with self._marked("throughput"):
            self.align()
            self._sleep(sleep_ms)
            if self.tp.world_size > 1:
                meet(self.device, self.tp.group)
            ms, enqueue = self._batch(fn, inputs, first, n)
        return ms / n, enqueue

    def eager(self, fn: Callable, inputs: Sequence, first: int, n: int) -> float:
        """ms per call over ``n`` calls back to back, nothing queued ahead of them, after an untimed
        one (it warms what a batch before may have left cold); the calls declare ``both``, an eager
        call's mode."""
        with self._marked("both"):
            self.align()
            fn(inputs[first % len(inputs)])
            ms, _ = self._batch(fn, inputs, first, n)
        return ms / n

    def _batch(self, fn: Callable, inputs: Sequence, first: int, n: int) -> tuple[float, float]:
        """(ms of ``n`` calls by CUDA events, on CPU by the wall clock; host ms to issue them), synced."""
        t0 = time.perf_counter()
        if self.cuda:
            self.start.record()
        for i in range(n):
            fn(inputs[(first + i) % len(inputs)])
        if self.cuda:
            self.end.record()
        enqueue = (time.perf_counter() - t0) * 1e3
        self.sync()
        return self.start.elapsed_time(self.end) if self.cuda else enqueue, enqueue

    def latency(self, fn: Callable, x) -> tuple[float, float]:
        """(wall ms of one call and its sync, CUDA-event ms of the call), the ranks aligned first."""
        with self._marked("latency"):
            self.align()
            t0 = time.perf_counter()
            if self.cuda:
                self.start.record()
            fn(x)
            if self.cuda:
                self.end.record()
            self.sync()
            wall = (time.perf_counter() - t0) * 1e3
        return wall, self.start.elapsed_time(self.end) if self.cuda else wall

    def host(self, fn: Callable, x, sleep_ms: float) -> float:
        """Host ms of one call, issued while the device sleeps."""
        with self._marked("latency"):
            self.align()
            self._sleep(sleep_ms)
            t0 = time.perf_counter()
            fn(x)
            ms = (time.perf_counter() - t0) * 1e3
            self.sync()
        return ms

    @contextlib.contextmanager
    def _marked(self, mode: str):
        """:attr:`mode` is ``mode`` inside (a queued batch is ``"throughput"``, an eager batch
        ``"both"``, a call alone ``"latency"``), and the calls made inside declare it
        (:func:`fluxlite.dispatch.assume_mode`): ``auto`` runs that mode's choice, as for a caller
        who says which kind of calls it makes. Entered outside the timed part, so that declaring
        the mode costs ``auto`` nothing the others do not pay."""
        from .dispatch import assume_mode  # dispatch measures with this module's timer

        self.mode = mode
        try:
            with assume_mode(mode):
                yield
        finally:
            self.mode = None


def run_each_once(timer: Timer, fns: dict[str, Callable], x) -> tuple[dict, dict[str, str]]:
    """Call each of ``fns`` once on ``x`` (a warm-up, and the outputs for a check), in order.

    A callable that raises on any rank is removed from ``fns`` on every rank (the ranks agree
    through :meth:`Timer.max_over_ranks`), and every fluxlite workspace is released, since a failed
    fused call leaves its workspace poisoned. Returns ``({name: output}, {name: why it failed})``.
    """
    outputs, failed = {}, {}
    for name, fn in list(fns.items()):
        why = ""
        try:
            outputs[name] = fn(x)
            synchronize(timer.tp.group)  # a timeout a fused kernel recorded is raised here
            timer.sync()
        except Exception as exc:  # reported, and the callable dropped on every rank
            why = f"{type(exc).__name__}: {exc}"[:300]
        if timer.max_over_ranks([float(bool(why))])[0]:
            failed[name] = why or "failed on another rank"
            del fns[name]
            outputs.pop(name, None)
            release_workspaces()
    return outputs, failed


WARM_MODES = ("throughput", "latency")
"""The modes a warm-up runs in (:meth:`Timer._marked`): a callable that runs what its mode declares
(``auto``) warms each mode's choice."""


def warmup_calls(warmup: int, sets: int) -> int:
    """Untimed calls per callable and mode before timing: at least ``warmup``, and (``warmup > 0``)
    enough that every input set meets either data half of the fused workspace twice, so that a
    fused call's eager replays (:meth:`fluxlite.fused.Call.run`: captured the second time the same
    addresses and parity come, replayed from the third) are in place for every input the rounds
    pass, in every mode. With fewer, a callable that runs fused in one mode only (``auto`` at small
    M) paid the captures inside the timed rounds. :func:`warmup_input` says in which order."""
    return 0 if warmup <= 0 else max(warmup, 2 * 2 * sets)


def warmup_input(i: int, sets: int) -> int:
    """The input set of a callable's ``i``-th warm-up call: each set twice in a row, the sets in turn.

    A callable's warm-up calls run back to back (not interleaved with the other callables'), so two
    calls in a row take the two data halves of a fused workspace in turn, whatever the others do
    and however many sets there are: every set meets each half twice in :func:`warmup_calls`
    calls. Interleaved, where an even number of the callables make fused calls (``fused`` beside
    ``auto``, or ``auto``'s candidates, one per kernel config), all of a callable's warm-up calls
    fell on one parity, and its first calls on the other half, in the timed rounds, ran
    without a graph and then captured one."""
    return (i // 2) % sets


def time_samples(timer: Timer, fns: dict[str, Callable], inputs: Sequence, *, rounds: int, warmup: int = 1,
                 batch_ms: float = 20.0, max_batch: int = 30, min_sleep_ms: float = 25.0, batch: dict | None = None,
                 first_round: int = 0, host: bool = True) -> tuple[dict[str, dict[str, list[float]]], dict]:
    """``({name: {mode: [ms of each round]}}, batch)``: this rank's reading of every callable of ``fns``
    in every mode of :data:`MODES`, one per round (not reduced over the ranks); ``batch``: the calls
    per throughput batch and the sleeps used (``n``, ``sleep_ms``, ``host_sleep_ms``).

    :func:`warmup_calls` untimed calls of each first, in each of :data:`WARM_MODES`; then a probe
    sizes the throughput batch (at least ``batch_ms`` of device work, at most ``max_batch`` calls,
    at least 1) and the sleeps ahead of it (longer than the host takes to issue the batch), agreed
    over the ranks; then ``rounds`` rounds.
    More rounds of the same measurement: pass the ``batch`` it returned (no warm-up or probe then)
    and ``first_round``, the rounds already run (the order of the callables goes on rotating).
    ``host=False`` skips the host mode's call and sleep in every round (its readings are NaN): for
    callers that read only the device modes.
    """
    names = list(fns)
    if not names:
        return {}, {}
    if batch is None:
        for mode in WARM_MODES:
            with timer._marked(mode):
                for name in names:  # each callable's calls back to back (warmup_input)
                    for i in range(warmup_calls(warmup, len(inputs))):
                        fns[name](inputs[warmup_input(i, len(inputs))])
        probe = timer.max_over_ranks([v for n in names for v in (timer.latency(fns[n], inputs[0])[1],
                                                                  timer.host(fns[n], inputs[0], 5.0))])
        call_ms, host_ms = max(max(probe[0::2]), 1e-3), max(probe[1::2])
        n = max(1, min(max_batch, math.ceil(batch_ms / call_ms)))
        batch = dict(n=n, sleep_ms=min(500.0, max(min_sleep_ms, 1.5 * n * host_ms + 2)) if timer.cuda else 0.0,
                     host_sleep_ms=max(5.0, 3 * host_ms) if timer.cuda else 0.0)
    samples = {name: {m: [] for m in MODES} for name in names}
    for r in range(first_round, first_round + rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, s = fns[name], samples[name]
            tp, enqueue = timer.throughput(fn, inputs, r, batch["n"], batch["sleep_ms"])
            eager = timer.eager(fn, inputs, r, batch["n"])
            # A latency-bound loop's call follows the same call, made the same way: so an untimed one
            # goes first. Timed right after the throughput batch instead, a callable that runs another
            # implementation per mode (auto) would be timed on its first call of that choice since the
            # batch of the other, with the host's caches and the device as that batch left them.
            # The round's reading is the median of LATENCY_CALLS such calls: one aligned call's time
            # moves with how fast the host wakes after the sync, by tens of us on 2xH200's host.
            timer.latency(fn, inputs[r % len(inputs)])
            walls, events = zip(*(timer.latency(fn, inputs[r % len(inputs)]) for _ in range(LATENCY_CALLS)))
            wall, event = statistics.median(walls), statistics.median(events)
            host_ms = timer.host(fn, inputs[(r + 1) % len(inputs)], batch["host_sleep_ms"]) if host else math.nan
            for mode, v in zip(MODES, (tp, wall, event, host_ms, enqueue, eager)):
                s[mode].append(v)
    return samples, batch


def time_rounds(timer: Timer, fns: dict[str, Callable], inputs: Sequence, *, rounds: int, warmup: int = 1,
                batch_ms: float = 20.0, max_batch: int = 30, min_sleep_ms: float = 25.0) -> tuple[dict, dict]:
    """``({name: {mode: ms}}, batch)``: :func:`time_samples`' readings, each the median over the rounds,
    then the max over the ranks."""
    samples, batch = time_samples(timer, fns, inputs, rounds=rounds, warmup=warmup, batch_ms=batch_ms,
                                  max_batch=max_batch, min_sleep_ms=min_sleep_ms)
    return medians(timer, samples), batch


def medians(timer: Timer, samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """``{name: {mode: ms}}``: each of :func:`time_samples`' readings, the median over the rounds,
    then the max over the ranks (the same on every rank)."""
    if not samples:
        return {}
    names = list(samples)
    med = timer.max_over_ranks([statistics.median(samples[nm][m]) for nm in names for m in MODES])
    return {nm: dict(zip(MODES, med[i * len(MODES):(i + 1) * len(MODES)])) for i, nm in enumerate(names)}


def per_round(timer: Timer, samples: dict[str, dict[str, list[float]]], names: Sequence[str],
              modes: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """``{name: {mode: [ms of each round]}}`` of ``names`` in ``modes``: :func:`time_samples`'
    readings round by round, each the max over the ranks (the same on every rank), so two
    callables compare in pairs, round by round."""
    flat = timer.max_over_ranks([v for nm in names for m in modes for v in samples[nm][m]])
    rounds = len(samples[names[0]][modes[0]]) if names and modes else 0
    it = iter(flat)
    return {nm: {m: [next(it) for _ in range(rounds)] for m in modes} for nm in names}
