"""Safety of the fused path on CPU ranks (gloo + /dev/shm): call agreement, bounded waits, recovery.

- **Call agreement.** Ranks that make the same fused call with different arguments (AG: ``m``, K,
  N_local, dtype, ``return_gathered``; RS: M, K_local, N, dtype; or one rank in the other op with the
  same shapes; AG-GEMM's transport alone, ``AG.gather``, at another ``m`` or against the op) all raise ``FluxliteCallMismatchError``, naming themselves and the peer, in well under
  half the timeout. Among 3 ranks the odd one names some peer and the others name the odd one. A
  disagreement that makes one rank need a bigger workspace, or one on the first call of a fresh
  workspace, ends in some ``FluxliteError`` on every rank within the timeout (+ slack).
- **Bounded waits.** A missing peer before the first fused call (the others' call builds the
  workspace collectively), during growth, in a GEMM-AllReduce (absent from the call, or gone after
  its partials: it never sets its ``finished`` flags), in a gather, and during the backward pass of Column ->
  GELU -> Row layers ends in ``FluxliteTimeoutError`` on the waiting rank within the timeout
  (+ slack), naming the missing peer. (A missing peer mid-call, at a flag, is
  tests/test_timeouts.py's.)
- **Afterwards.** The workspace is poisoned: the next fused call raises ``FluxliteError`` at once.
  Sequential calls still work. After ``fluxlite.release_workspaces()`` on every rank, fused calls of
  both ops are correct again (float64 references, NaN-filled ``out=`` and ``torch.empty``).

Each spawn runs many scenarios (a spawn costs 2-4 s). Every rank collects its failures and goes on
to the next scenario; rank 0 reports every rank's failures at the end. Between scenarios the ranks
meet only through the store, with a bounded wait, never through sleeps: a rank that stays stuck in a
collective fails the test with a message instead of hanging it. A rank that skips a call stays alive
and outside every collective until the waiting ranks are done. The data is fresh on every run; a
failure prints the seed, and ``FLUXLITE_TEST_SEED=<seed>`` replays it.
"""

from __future__ import annotations

import importlib
import os
import random
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fluxlite
from fluxlite import FluxliteError, FluxliteTimeoutError

from fluxlite import FluxliteCallMismatchError
from fluxlite.group import resolve_group
from fluxlite.host_flags import REDUCED_ROWS
from fluxlite.ops import AG

from .dist_utils import run_ranks
from .faults import never_finished
from .numerics import ag_reference, check, poison_empty_tensors, randn, rs_reference

# Set in the environment so that the spawned ranks (which import this module again) use the same seed.
os.environ.setdefault("FLUXLITE_TEST_SEED", str(random.randrange(2**31)))
SEED = int(os.environ["FLUXLITE_TEST_SEED"])

F32, BF16 = torch.float32, torch.bfloat16
NAN = float("nan")

MISMATCH_TIMEOUT_S = 20.0  # a mismatch must be reported long before this (in under half of it)
PEER_TIMEOUT_S = 1.0  # missing-peer scenarios
PEER_SLACK_S = 3.0  # scheduling noise allowed past the deadline on a loaded 2-core machine
GROWTH_TIMEOUT_S = 2.0  # disagreements where one rank needs a bigger workspace, or a fresh one
GROWTH_SLACK_S = 5.0
AT_ONCE_S = 1.0  # a poisoned workspace raises without waiting on anyone
MEET_S = 45.0  # bound on a store meeting: more than any scenario may take (a missed mismatch waits 20 s)

# Operands of the mismatched calls: every variant fits in the workspace that the warm-up calls
# (AG_WARM, RS_WARM) leave behind, so only the arguments differ, never the need to grow.
AG_BASE = ("ag", dict(m=40, K=24, N=16))
RS_BASE = ("rs", dict(M=48, K=24, N=16))  # M divisible by 2 and 3
AG_WARM = dict(m=64, K=32, N=24)
RS_WARM = dict(M=60, K=32, N=24)


def _with(spec, **changes):
    return (spec[0], {**spec[1], **changes})


# (name, what the other ranks call, what the odd rank calls)
MISMATCHES = [
    ("ag m", AG_BASE, _with(AG_BASE, m=47)),
    ("ag K", AG_BASE, _with(AG_BASE, K=32)),
    ("ag N_local", AG_BASE, _with(AG_BASE, N=20)),
    ("ag dtype", AG_BASE, _with(AG_BASE, dtype=BF16)),
    ("ag return_gathered", AG_BASE, _with(AG_BASE, gathered=True)),
    ("rs M", RS_BASE, _with(RS_BASE, M=60)),
    ("rs K_local", RS_BASE, _with(RS_BASE, K=32)),
    ("rs N", RS_BASE, _with(RS_BASE, N=20)),
    ("rs dtype", RS_BASE, _with(RS_BASE, dtype=BF16)),
    ("op ag_gemm vs gemm_rs", ("ag", dict(m=48, K=24, N=16)), ("rs", dict(M=48, K=24, N=16))),
    ("op gemm_rs vs ag_gemm", ("rs", dict(M=48, K=24, N=16)), ("ag", dict(m=48, K=24, N=16))),
    ("ar M (one-shot)", ("ar", dict(M=47, K=24, N=16)), ("ar", dict(M=45, K=24, N=16))),
    ("ar N (one-shot)", ("ar", dict(M=5, K=24, N=16)), ("ar", dict(M=5, K=24, N=20))),
    ("op gemm_ar (one-shot) vs gemm_rs", ("ar", dict(M=48, K=24, N=16)), ("rs", dict(M=48, K=24, N=16))),
    # AG-GEMM's transport alone (a Column backward's re-gather) against the op, and at another m
    ("gather vs ag_gemm", ("gather", dict(m=40, K=24)), ("ag", dict(m=40, K=24, N=16))),
    ("gather m", ("gather", dict(m=40, K=24)), ("gather", dict(m=33, K=24))),
]


# ---- per-rank bookkeeping ------------------------------------------------------------------------


class _Ctx:
    """One rank's view of a spawn: its failures, store meetings, and the seeds of checked calls."""

    def __init__(self, rank: int, W: int, test: str) -> None:
        self.rank, self.W, self.test = rank, W, test
        self.store = dist.distributed_c10d._get_default_store()
        self.failures: list[str] = []
        self.capacity: int | None = None  # the workspace's capacity after the last warm-up
        self.last_raised: BaseException | None = None  # what the last _raises() call raised
        self._meetings = 0
        self._draws = 0

    def fail(self, msg: str) -> None:
        self.failures.append(f"rank {self.rank}: {msg}")

    def gen(self) -> torch.Generator:
        """The generator of the next checked call: the same on every rank (the calls are collective)."""
        self._draws += 1
        return torch.Generator().manual_seed(SEED * 1009 + self._draws)

    def meet(self, tag: str, timeout_s: float = MEET_S) -> None:
        """A barrier through the store, bounded: no collective, so it works beside a stuck peer."""
        self._meetings += 1
        key = f"safety/{self._meetings}/{tag}"
        self.store.set(f"{key}/{self.rank}", "1")
        try:
            self.store.wait([f"{key}/{r}" for r in range(self.W)], timedelta(seconds=timeout_s))
        except Exception as exc:
            stuck = [r for r in range(self.W) if not self.store.check([f"{key}/{r}"])]
            raise AssertionError(
                f"{self.test}: rank {self.rank}: ranks {stuck} did not reach '{tag}' within {timeout_s:g} s: stuck "
                f"(seed {SEED}). Failures so far on this rank:\n" + "\n".join(self.failures)
            ) from exc

    def report(self) -> None:
        """Rank 0 raises every rank's failures at once."""
        self.store.set(f"safety/failures/{self.rank}", "\n".join(["-"] + self.failures))
        self.meet("report")
        if self.rank == 0:
            lines = []
            for r in range(self.W):
                lines += self.store.get(f"safety/failures/{r}").decode().split("\n")[1:]
            assert not lines, (f"{self.test}: {len(lines)} failures (replay with FLUXLITE_TEST_SEED={SEED}):\n"
                               + "\n".join(lines))


# ---- calls ---------------------------------------------------------------------------------------


def _call(spec, timeout: float, seed: int = 0):
    """One fused call of ``spec = (op, params)`` on fresh data; the result is not checked."""
    op, p = spec
    gen = torch.Generator().manual_seed(seed)
    dtype = p.get("dtype", F32)
    if op == "gather":
        return AG.gather(randn(gen, p["m"], p["K"], dtype=dtype), resolve_group(None), timeout)
    if op == "ag":
        a, w = randn(gen, p["m"], p["K"], dtype=dtype), randn(gen, p["N"], p["K"], dtype=dtype)
        return fluxlite.ag_gemm(a, w, impl="fused", return_gathered=p.get("gathered", False), timeout=timeout)
    a, w = randn(gen, p["M"], p["K"], dtype=dtype), randn(gen, p["N"], p["K"], dtype=dtype)
    if op == "ar":
        return fluxlite.gemm_ar(a, w, impl="fused", timeout=timeout)
    return fluxlite.gemm_rs(a, w, impl="fused", timeout=timeout)


def _check_ag(ctx: _Ctx, tag: str, m: int, K: int, N: int, *, impl: str = "fused", gathered: bool = False,
              bias: bool = True) -> None:
    """A checked AG-GEMM: every rank draws every rank's rows and weight, and keeps its own."""
    W, r = ctx.W, ctx.rank
    gen = ctx.gen()
    a_full = randn(gen, W * m, K, dtype=F32)
    weights = [randn(gen, N, K, dtype=F32) for _ in range(W)]
    b = randn(gen, N, dtype=F32) if bias else None
    out = torch.full((W * m, N), NAN)
    name = f"{tag}: ag_gemm m={m} K={K} N={N} impl={impl} gathered={gathered} bias={bias}"
    try:
        res = fluxlite.ag_gemm(a_full[r * m : (r + 1) * m], weights[r], b, impl=impl, return_gathered=gathered,
                               out=out)
    except Exception as exc:
        ctx.fail(f"{name}: raised {type(exc).__name__}: {exc}")
        return
    if gathered:
        res, g = res
        if not (isinstance(g, torch.Tensor) and g.shape == a_full.shape and torch.equal(g, a_full)):
            ctx.fail(f"{name}: the gathered input differs from the rank-major rows")
    if res is not out:
        ctx.fail(f"{name}: the result is not the out= tensor")
    failures: list[str] = []
    check(name, res, ag_reference(a_full, weights[r], b), F32, failures)
    for f in failures:
        ctx.fail(f)


def _check_rs(ctx: _Ctx, tag: str, M: int, K: int, N: int, *, impl: str = "fused", bias: bool = True) -> None:
    """A checked GEMM-RS: every rank draws every rank's operands and keeps its own."""
    W, r = ctx.W, ctx.rank
    gen = ctx.gen()
    a_parts = [randn(gen, M, K, dtype=F32) for _ in range(W)]
    w_parts = [randn(gen, N, K, dtype=F32) for _ in range(W)]
    b = randn(gen, N, dtype=F32) if bias else None
    out = torch.full((M // W, N), NAN)
    name = f"{tag}: gemm_rs M={M} K={K} N={N} impl={impl} bias={bias}"
    try:
        res = fluxlite.gemm_rs(a_parts[r], w_parts[r], b, impl=impl, out=out)
    except Exception as exc:
        ctx.fail(f"{name}: raised {type(exc).__name__}: {exc}")
        return
    if res is not out:
        ctx.fail(f"{name}: the result is not the out= tensor")
    failures: list[str] = []
    check(name, res, rs_reference(a_parts, w_parts, b, r), F32, failures)
    for f in failures:
        ctx.fail(f)


def _warm(ctx: _Ctx, tag: str) -> None:
    """Checked fused calls of both ops at the largest sizes of the mismatch scenarios; note the capacity."""
    _check_ag(ctx, f"{tag}/warm-up", **AG_WARM)
    _check_rs(ctx, f"{tag}/warm-up", **RS_WARM)
    _check_ag(ctx, f"{tag}/warm-up", 9, 32, 24, gathered=True, bias=False)
    ctx.capacity = fluxlite.get_workspace().capacity


def _rows_to_grow(capacity: int, row_bytes: int, multiple: int) -> int:
    """Rows whose data alone (``row_bytes`` each) is more than ``capacity``: any call on them must grow."""
    rows = capacity // row_bytes + 64
    return -(-rows // multiple) * multiple


# ---- expectations --------------------------------------------------------------------------------


def _raises(ctx: _Ctx, name: str, fn, exc_type, within_s: float, at_least_s: float = 0.0, report: bool = True):
    """Run ``fn``; note a failure (if ``report``) unless it raises ``exc_type`` within ``within_s``
    (and not before ``at_least_s``). Returns the exception if it is an ``exc_type``, else None."""
    fail = ctx.fail if report else (lambda msg: None)
    t0 = time.monotonic()
    ctx.last_raised = None
    try:
        fn()
    except Exception as exc:
        elapsed = time.monotonic() - t0
        ctx.last_raised = exc
        if not isinstance(exc, exc_type):
            fail(f"{name}: raised {type(exc).__name__} after {elapsed:.2f} s, expected {exc_type.__name__}: {exc}")
            return None
        if not at_least_s <= elapsed <= within_s:
            fail(f"{name}: {type(exc).__name__} after {elapsed:.2f} s, expected in [{at_least_s:g}, "
                 f"{within_s:g}] s: {exc}")
        return exc
    fail(f"{name}: returned after {time.monotonic() - t0:.2f} s, expected {exc_type.__name__}")
    return None


def _check_names(ctx: _Ctx, name: str, exc, odd: int | None) -> None:
    """``exc`` names this rank, and a peer: the odd rank if this rank is not it, else some other rank."""
    r, W = ctx.rank, ctx.W
    if not isinstance(exc, (FluxliteCallMismatchError, FluxliteTimeoutError)):
        return
    want = f"some peer in {sorted(set(range(W)) - {r})}" if odd in (None, r) else f"peer {odd}"
    ok = exc.peer != r and 0 <= exc.peer < W and (odd in (None, r) or exc.peer == odd)
    if exc.rank != r or not ok:
        ctx.fail(f"{name}: {type(exc).__name__} names rank {exc.rank}, peer {exc.peer}; expected rank {r}, {want}: {exc}")
    elif f"peer rank {exc.peer}" not in str(exc):
        ctx.fail(f"{name}: the message does not name peer rank {exc.peer}: {exc}")


def _check_poisoned(ctx: _Ctx, tag: str, within_s: float = AT_ONCE_S) -> None:
    """The next fused call of either op raises FluxliteError at once, even one that would grow.

    Every rank makes these calls (so that the ranks stay in step), but a rank whose failing call did
    not raise a FluxliteError (already reported) does not report them: its workspace need not be poisoned.
    """
    expected = isinstance(ctx.last_raised, FluxliteError)
    small = [("ag", dict(m=8, K=16, N=8)), ("rs", dict(M=6 * ctx.W, K=16, N=8))]
    if ctx.capacity:
        small.append(("ag", dict(m=_rows_to_grow(ctx.capacity, 16 * 4, 1), K=16, N=8)))
    for spec in small:
        _raises(ctx, f"{tag}: poisoned workspace, then {spec[0]} {spec[1]}", lambda: _call(spec, GROWTH_TIMEOUT_S),
                FluxliteError, within_s, report=expected)


def _recover(ctx: _Ctx, tag: str) -> None:
    """Sequential calls work on the poisoned workspace's group; after release_workspaces() on every
    rank, fused calls of both ops (the first builds a fresh workspace) are correct."""
    W = ctx.W
    _check_ag(ctx, f"{tag}/sequential", 8, 12, 8, impl="sequential", gathered=True)
    _check_rs(ctx, f"{tag}/sequential", 4 * W, 12, 8, impl="sequential")
    fluxlite.release_workspaces()
    ctx.meet(f"{tag}/released")
    _warm(ctx, f"{tag}/recovered")
    _check_rs(ctx, f"{tag}/recovered", 5 * W, 24, 16, bias=False)
    _check_ag(ctx, f"{tag}/recovered", 17, 24, 16)


# ---- scenarios -----------------------------------------------------------------------------------


def _mismatch(ctx: _Ctx, name: str, base, odd_spec, odd: int) -> None:
    """Rank ``odd`` calls ``odd_spec``, the others ``base``: every rank raises FluxliteCallMismatchError promptly."""
    tag = f"mismatch '{name}' (odd rank {odd}, W={ctx.W})"
    spec = odd_spec if ctx.rank == odd else base
    exc = _raises(ctx, tag, lambda: _call(spec, MISMATCH_TIMEOUT_S, seed=ctx.rank), FluxliteCallMismatchError,
                  MISMATCH_TIMEOUT_S / 2)
    if exc is not None:
        _check_names(ctx, tag, exc, odd)
        if not (isinstance(exc.mine, str) and isinstance(exc.theirs, str) and exc.mine != exc.theirs):
            ctx.fail(f"{tag}: mine={exc.mine!r} and theirs={exc.theirs!r} should describe two different calls")
    ctx.meet(tag)
    _check_poisoned(ctx, tag)
    _recover(ctx, tag)


def _disagreement(ctx: _Ctx, name: str, base, odd_spec, odd: int) -> None:
    """Rank ``odd`` calls ``odd_spec`` (e.g. one that must grow the workspace), the others ``base``:
    every rank raises some FluxliteError within the timeout + slack, naming a peer if it names one."""
    tag = f"disagreement '{name}' (odd rank {odd}, W={ctx.W})"
    spec = odd_spec if ctx.rank == odd else base
    exc = _raises(ctx, tag, lambda: _call(spec, GROWTH_TIMEOUT_S, seed=ctx.rank), FluxliteError,
                  GROWTH_TIMEOUT_S + GROWTH_SLACK_S)
    if exc is not None:
        _check_names(ctx, tag, exc, odd if isinstance(exc, FluxliteCallMismatchError) else None)
    ctx.meet(tag)
    _check_poisoned(ctx, tag)
    _recover(ctx, tag)


def _missing_peer(ctx: _Ctx, tag: str, call, skipper: int, *, step_is_flag: bool | None,
                  poison_at_once: bool = True, instead=None, what: str | None = None) -> None:
    """Every rank but ``skipper`` runs ``call()``, which must raise FluxliteTimeoutError naming the
    skipper (and waiting for ``what``, if given) within the timeout + slack. The skipper runs
    ``instead()``, if given, then waits on the store, outside every collective."""
    r = ctx.rank
    done = f"{tag}/waiters done"
    if r == skipper:
        if instead is not None:
            instead()
        ctx.meet(done, timeout_s=PEER_TIMEOUT_S + PEER_SLACK_S + 20)
        _recover(ctx, tag)
        return
    exc = _raises(ctx, tag, call, FluxliteTimeoutError, PEER_TIMEOUT_S + PEER_SLACK_S, 0.99 * PEER_TIMEOUT_S)
    if exc is not None:
        if not isinstance(exc, TimeoutError):
            ctx.fail(f"{tag}: FluxliteTimeoutError is not a TimeoutError")
        if exc.rank != r or exc.peer != skipper:
            ctx.fail(f"{tag}: names rank {exc.rank}, peer {exc.peer}; expected rank {r}, peer {skipper}: {exc}")
        if f"peer rank {skipper}" not in str(exc):
            ctx.fail(f"{tag}: the message does not name peer rank {skipper}: {exc}")
        if exc.timeout_s != pytest.approx(PEER_TIMEOUT_S):
            ctx.fail(f"{tag}: timeout_s={exc.timeout_s}, expected {PEER_TIMEOUT_S}")
        if step_is_flag is not None and (exc.step == "flag") != step_is_flag:
            want = "'flag'" if step_is_flag else "a collective workspace step, not 'flag'"
            ctx.fail(f"{tag}: step={exc.step!r}, expected {want}: {exc}")
        if what is not None and exc.what != what:
            ctx.fail(f"{tag}: waited for {exc.what!r}, expected {what!r}: {exc}")
    if poison_at_once:
        _check_poisoned(ctx, tag)
    else:  # a workspace that was never built: the next call raises too, at once or after its own timeout
        _raises(ctx, f"{tag}: the next fused call", lambda: _call(AG_BASE, PEER_TIMEOUT_S), FluxliteError,
                PEER_TIMEOUT_S + PEER_SLACK_S)
    ctx.meet(done)
    _recover(ctx, tag)


# ---- workers -------------------------------------------------------------------------------------


def _mismatch_worker(rank: int, W: int) -> None:
    poison_empty_tensors()
    ctx = _Ctx(rank, W, f"call mismatches on {W} ranks")
    _warm(ctx, "start")
    for i, (name, base, odd_spec) in enumerate(MISMATCHES):
        _mismatch(ctx, name, base, odd_spec, odd=(i + 1) % W)
    if W > 2:  # one rank alone needs a bigger workspace
        grow = _rows_to_grow(ctx.capacity, 64 * 4, 1)
        _disagreement(ctx, "ag m that must grow on one rank", ("ag", dict(m=40, K=64, N=16)),
                      ("ag", dict(m=grow, K=64, N=16)), odd=W - 1)
    ctx.report()


def _growth_disagreement_worker(rank: int, W: int) -> None:
    poison_empty_tensors()
    ctx = _Ctx(rank, W, "disagreements that need a bigger workspace on one rank")
    _warm(ctx, "start")
    grow_ag = _rows_to_grow(ctx.capacity, 64 * 4, 1)
    _disagreement(ctx, f"ag m={grow_ag} (must grow) vs m=40", ("ag", dict(m=40, K=64, N=16)),
                  ("ag", dict(m=grow_ag, K=64, N=16)), odd=1)
    grow_rs = _rows_to_grow(ctx.capacity, 64 * 4, W)
    _disagreement(ctx, f"rs M={grow_rs} (must grow) vs M=48", ("rs", dict(M=48, K=24, N=64)),
                  ("rs", dict(M=grow_rs, K=24, N=64)), odd=0)
    # The disagreement is in the very first fused call after a release: the call that builds the workspace.
    for name, base, odd_spec in (MISMATCHES[0], MISMATCHES[9]):
        fluxlite.release_workspaces()
        ctx.meet(f"released before first-call '{name}'")
        _disagreement(ctx, f"first call: {name}", base, odd_spec, odd=1)
    ctx.report()


def _missing_peer_worker(rank: int, W: int) -> None:
    poison_empty_tensors()
    ctx = _Ctx(rank, W, "missing peer before the first call and during growth")
    # (a) Before the very first fused call of the process: the waiting rank's call builds the workspace.
    _missing_peer(ctx, "missing peer before the first call (ag_gemm)", lambda: _call(AG_BASE, PEER_TIMEOUT_S),
                  skipper=1, step_is_flag=False, poison_at_once=False)
    # (a') The same for the first call after release_workspaces(), GEMM-RS, the other rank missing.
    fluxlite.release_workspaces()
    ctx.meet("released before (a')")
    _missing_peer(ctx, "missing peer before the first call after a release (gemm_rs)",
                  lambda: _call(RS_BASE, PEER_TIMEOUT_S), skipper=0, step_is_flag=False, poison_at_once=False)
    # (b) During growth: every rank made small fused calls (the recovery's); the others' next call must grow.
    for op, skipper in (("ag", 1), ("rs", 0)):
        if op == "ag":
            _check_ag(ctx, "before growth", 16, 64, 16)
            big = ("ag", dict(m=_rows_to_grow(fluxlite.get_workspace().capacity, 64 * 4, 1), K=64, N=16))
        else:
            _check_rs(ctx, "before growth", 8 * W, 24, 64)
            big = ("rs", dict(M=_rows_to_grow(fluxlite.get_workspace().capacity, 64 * 4, W), K=24, N=64))
        _missing_peer(ctx, f"missing peer during growth ({op}, {big[1]})", lambda: _call(big, PEER_TIMEOUT_S),
                      skipper=skipper, step_is_flag=False)
    # (c) GEMM-AllReduce in steady state, one-shot: a call every rank makes, then one a rank skips (a
    # flag wait in the reduction).
    ar = ("ar", dict(M=4 * W + 1, K=24, N=16))
    _call(ar, PEER_TIMEOUT_S)
    _missing_peer(ctx, "missing peer in a one-shot gemm_ar call", lambda: _call(ar, PEER_TIMEOUT_S), skipper=W - 1,
                  step_is_flag=True)
    # (c') AG-GEMM's transport alone (a Column backward's re-gather), steady state: a peer's rows never come.
    gather = ("gather", dict(m=9, K=24))
    _call(gather, PEER_TIMEOUT_S)
    _missing_peer(ctx, "missing peer in a gather", lambda: _call(gather, PEER_TIMEOUT_S), skipper=0,
                  step_is_flag=True)
    # (e) GEMM-AllReduce, two-shot (the one-shot turned off on every rank), a peer gone after its
    # partials: they all arrive, so the waiting rank's own reduction completes, but the peer never
    # announces its reduced rows (its producer's reduced flags, split by split, behind its copies).
    gemm_ar = importlib.import_module("fluxlite.ops.gemm_ar")
    one_shot_max, gemm_ar.ONE_SHOT_MAX_BYTES = gemm_ar.ONE_SHOT_MAX_BYTES, 0
    ar = ("ar", dict(M=4 * W + 3, K=24, N=16))  # a shape no call made yet: the skipper's program is built anew
    call = lambda: _call(ar, PEER_TIMEOUT_S)  # noqa: E731
    _missing_peer(ctx, "two-shot gemm_ar peer gone after its partials", call, skipper=0, step_is_flag=True,
                  what=REDUCED_ROWS, instead=lambda: never_finished(call))
    gemm_ar.ONE_SHOT_MAX_BYTES = one_shot_max  # the workspaces were released since (recovery)
    ctx.report()


H, FFN, S, B = 32, 64, 16, 2  # layers: [S/W, B, H] -> Column -> [S, B, FFN/W] -> GELU -> Row -> [S/W, B, H]


def _layers(overlap: str, seed: int):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=F32, use_cpu_initialization=True)
    torch.manual_seed(seed)  # the same weights for every overlap

    def init(w):
        return torch.nn.init.normal_(w, std=0.2)

    col = ColumnParallelLinear(H, FFN, config=cfg, init_method=init, bias=True, gather_output=False, overlap=overlap)
    row = RowParallelLinear(FFN, H, config=cfg, init_method=init, bias=True, input_is_parallel=True,
                            skip_bias_add=False, overlap=overlap)
    return col, row


def _forward(col, row, x):
    return row(torch.nn.functional.gelu(col(x)[0]))[0]


def _check_layers(ctx: _Ctx, tag: str) -> None:
    """Forward and backward with overlap="fused" match overlap="sequential" (same weights and data)."""
    gen = ctx.gen()
    x0 = randn(gen, S, B, H, dtype=F32)[ctx.rank * S // ctx.W : (ctx.rank + 1) * S // ctx.W]
    g = randn(gen, S, B, H, dtype=F32)[ctx.rank * S // ctx.W : (ctx.rank + 1) * S // ctx.W]
    results = []
    for overlap in ("sequential", "fused"):
        col, row = _layers(overlap, SEED)
        x = x0.clone().requires_grad_()
        try:
            y = _forward(col, row, x)
            y.backward(g)
        except Exception as exc:
            ctx.fail(f"{tag}: layers with overlap={overlap!r} raised {type(exc).__name__}: {exc}")
            return
        results.append([y.detach(), x.grad, col.weight.grad, col.bias.grad, row.weight.grad, row.bias.grad])
    for what, s, f in zip(("output", "input grad", "col weight grad", "col bias grad", "row weight grad",
                           "row bias grad"), *results):
        if not torch.allclose(f, s, rtol=1e-4, atol=1e-4):
            ctx.fail(f"{tag}: layers' {what} with overlap='fused' differs from 'sequential' by "
                     f"{(f - s).abs().max().item():.3g}")


def _backward_worker(rank: int, W: int) -> None:
    """(d) Every rank runs the forward; one skips the backward: the other's backward raises."""
    poison_empty_tensors()
    ctx = _Ctx(rank, W, "missing peer during backward")
    _check_layers(ctx, "before")
    for skipper in (1, 0):
        gen = ctx.gen()
        x = randn(gen, S // W, B, H, dtype=F32).requires_grad_()
        col, row = _layers("fused", SEED + skipper)
        fluxlite.set_default_timeout(PEER_TIMEOUT_S)  # the layers take no timeout argument
        try:
            y = _forward(col, row, x)
        except Exception as exc:
            ctx.fail(f"forward before the skipped backward raised {type(exc).__name__}: {exc}")
        tag = f"missing peer during backward (rank {skipper} skips it)"
        if rank == skipper:
            del y  # this rank's graph is dropped: it never runs the backward
        _missing_peer(ctx, tag, lambda: y.backward(torch.ones_like(y)), skipper=skipper, step_is_flag=None)
        fluxlite.set_default_timeout(None)
        _check_layers(ctx, f"{tag}/recovered")
    ctx.report()


# ---- tests ---------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_call_mismatch_2_ranks():
    run_ranks(_mismatch_worker, 2, timeout_s=MISMATCH_TIMEOUT_S)


@pytest.mark.timeout(150)
def test_call_mismatch_3_ranks():
    run_ranks(_mismatch_worker, 3, timeout_s=MISMATCH_TIMEOUT_S)


@pytest.mark.timeout(120)
def test_growth_and_first_call_disagreement_2_ranks():
    run_ranks(_growth_disagreement_worker, 2, timeout_s=MISMATCH_TIMEOUT_S)


@pytest.mark.timeout(120)
def test_missing_peer_before_first_call_and_during_growth():
    run_ranks(_missing_peer_worker, 2, timeout_s=MISMATCH_TIMEOUT_S)


@pytest.mark.timeout(120)
def test_missing_peer_during_backward():
    run_ranks(_backward_worker, 2, timeout_s=MISMATCH_TIMEOUT_S)
