"""GPU safety tests (2 GPUs, NCCL, bf16): a first-call GEMM-RS repro, a liveness sweep of mixed
fused calls over a wide range of shapes, missing peers at every point of a call's life, recovery
after a timeout, and ranks in different calls (another op, shape, dtype or option). Run on the lent 2xH200 with ``scripts/gpu_suite.sh tests`` (``-s`` shows the
sweep's summary line).

Every test runs in fresh processes (``run_gpu_ranks``), so a first call is a true first call, and
under ``limit_s``, so a hang fails the test instead of blocking the suite. Tolerance: relative
Frobenius error ``< 1e-2`` against a float32 reference computed on the GPU from the same bf16
operands (AG: NCCL all_gather then matmul; RS: all_reduce of the fp32 product, then this rank's
rows). Outputs are NaN-filled before the call where ``out=`` is passed; a NaN left behind fails.

On GPU a kernel cannot raise: a timeout surfaces at the call itself, at the next fused call, or at
``fluxlite.synchronize()``. The missing-peer checks therefore time "call, then synchronize". The
rank that skips stays alive and outside every collective (it waits on the store) until the waiting
rank is done.
"""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from .faults import never_finished
from .gpu_utils import ag_reference as _ag_reference, dev as _dev, rs_reference as _rs_reference, rel_err, run_gpu_ranks

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
TOL = 1e-2
NAN = float("nan")
SEED = int(os.environ.get("FLUXLITE_TEST_SEED", "20251123"))





def _rel_err32(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` with float32 temporaries (the sweep's outputs reach ~1e9 elements:
    gpu_utils.rel_err's float64 copies would not fit beside them); NaN gives inf."""
    diff = out.float()
    diff.sub_(ref)
    num = diff.norm().item()
    del diff
    if num != num:
        return float("inf")
    return num / max(ref.norm().item(), 1e-30)


def _operands(gen, rows: int, K: int, N: int):
    a = torch.randn(rows, K, generator=gen, device=_dev()).to(BF16)
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    return a, w


def _check_ag(gen, m, K, N, *, bias=False, gathered=False, timeout=15.0, tag=""):
    """A fused AG-GEMM against the reference; returns the relative error (raises on a gathered mismatch)."""
    import fluxlite

    a, w = _operands(gen, m, K, N)
    b = torch.randn(N, generator=gen, device=_dev()).to(BF16) if bias else None
    out = torch.full((dist.get_world_size() * m, N), NAN, dtype=BF16, device=_dev())
    res = fluxlite.ag_gemm(a, w, b, impl="fused", return_gathered=gathered, out=out, timeout=timeout)
    fluxlite.synchronize()
    if gathered:
        res, g = res
    assert res is out, f"{tag}: the result is not the out= tensor"
    ref, ref_g = _ag_reference(a, w, b)
    if gathered:
        assert torch.equal(g, ref_g), f"{tag}: AG m={m} K={K} N={N}: gathered input differs from all_gather(a)"
    err = _rel_err32(out, ref)
    assert err < TOL, f"{tag}: AG m={m} K={K} N={N} bias={bias} gathered={gathered}: rel err {err:.3g}"
    return err


def _check_rs(gen, M, K, N, *, bias=False, timeout=15.0, tag=""):
    import fluxlite

    a, w = _operands(gen, M, K, N)
    b = None
    if bias:
        b = torch.randn(N, generator=gen, device=_dev()).to(BF16)
        dist.broadcast(b, 0)  # the bias is replicated
    out = torch.full((M // dist.get_world_size(), N), NAN, dtype=BF16, device=_dev())
    res = fluxlite.gemm_rs(a, w, b, impl="fused", out=out, timeout=timeout)
    fluxlite.synchronize()
    assert res is out, f"{tag}: the result is not the out= tensor"
    err = _rel_err32(out, _rs_reference(a, w, b))
    assert err < TOL, f"{tag}: RS M={M} K={K} N={N} bias={bias}: rel err {err:.3g}"
    return err


class _Meet:
    """Barriers through the store, bounded: no collective, so a rank can wait beside a stuck peer."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.store = dist.distributed_c10d._get_default_store()
        self.rank, self.world_size, self.n = rank, world_size, 0

    def __call__(self, tag: str, timeout_s: float = 120.0, value: str = "1") -> list[str]:
        """Meet at ``tag``; every rank's ``value``, in rank order."""
        self.n += 1
        key = f"gpu-safety/{self.n}/{tag}"
        self.store.set(f"{key}/{self.rank}", value)
        keys = [f"{key}/{r}" for r in range(self.world_size)]
        try:
            self.store.wait(keys, timedelta(seconds=timeout_s))
        except Exception as exc:
            raise AssertionError(f"rank {self.rank}: not every rank reached '{tag}' within {timeout_s:g} s") from exc
        return [self.store.get(k).decode() for k in keys]

    def all_agree(self, mine: bool) -> bool:
        """Whether ``mine`` holds on every rank (every rank gets the same answer)."""
        return all(v == "1" for v in self("agree", value="1" if mine else "0"))


# ---- 1. a first-call GEMM-RS repro: Llama-70B fc2 at 1024 tokens ----------------------------------


def _rs_repro(rank, world_size, k_first):
    import fluxlite

    gen = torch.Generator(device=_dev()).manual_seed(1000 + rank)
    M, N = 1024, 8192
    for K in (k_first, 2048 if k_first != 2048 else 14336):
        a, w = _operands(gen, M, K, N)
        out = torch.full((M // world_size, N), NAN, dtype=BF16, device=_dev())
        t0 = time.monotonic()
        # The first one is the first fluxlite call of this process: it builds the workspace, compiles
        # the kernel and runs, all under a short timeout so that a deadlock fails fast.
        res = fluxlite.gemm_rs(a, w, impl="fused", timeout=10, out=out)
        fluxlite.synchronize()
        elapsed = time.monotonic() - t0
        assert res is out
        err = rel_err(out, _rs_reference(a, w, None))
        assert err < TOL, f"RS M={M} K_local={K} N={N} (first K_local {k_first}): rel err {err:.3g}"
        if rank == 0:
            print(f"gemm_rs [{M}, {K}] x [{N}, {K}]^T W={world_size}: rel err {err:.2e}, {elapsed:.2f} s "
                  f"(first K_local {k_first})", flush=True)


@pytest.mark.parametrize("k_first", [14336, 2048])
def test_rs_repro_llama70b_fc2_1024_tokens(k_first):
    """First fused call in a fresh process: gemm_rs(a [1024, K_local], w [8192, K_local]) at W=2,
    K_local = 14336 (Llama-70B fc2 at TP=2) and 2048, each in turn as the very first call."""
    run_gpu_ranks(_rs_repro, 2, k_first, env={"CUDA_MODULE_LOADING": "LAZY"}, limit_s=180)


# ---- 2. liveness sweep ---------------------------------------------------------------------------

SWEEP_CALLS = 480
SWEEP_DIMS = [64, 100, 256, 1000, 1024, 2048, 4096, 5120, 8192, 14336, 28672, 32768]
# Total rows M; AG's per-rank m is ceil(M / W), RS's M is rounded up to a multiple of W. Some values
# make the per-rank chunk ragged at W=2 (258 -> 129, 2050 -> 1025, 6002 -> 3001, 16382 -> 8191).
SWEEP_ROWS = [1, 2, 7, 63, 64, 65, 127, 129, 255, 257, 258, 1000, 1023, 1024, 1025, 2050, 3000, 4095, 4097, 6002,
              8191, 8193, 12000, 16382, 16383, 16384]
SWEEP_MAX_FLOPS = 2e12  # per rank and call
SWEEP_MAX_BYTES = 4e9  # per call, operands + outputs + reference temporaries; bursts hold up to 3 calls
SWEEP_TIMEOUT_S = 15.0


def _sweep_bytes(op, rows, K, N, W):
    """Rough peak bytes of one call of the sweep with its reference (see _sweep)."""
    if op == "ag":
        R = W * -(-rows // W)  # gathered rows
        return R * K * 10 + N * K * 10 + R * N * 14
    M = W * -(-rows // W)
    return M * K * 10 + N * K * 10 + M * N * 10


def _sweep_draws(W):
    """The sweep's calls: the same list on every rank (the ops are collectives)."""
    rng = random.Random(SEED)
    draws, skipped = [], 0
    while len(draws) < SWEEP_CALLS:
        i = len(draws)
        op = rng.choice(("ag", "rs")) if i % 3 else ("ag" if i % 2 else "rs")
        if i < 40:  # a ramp: the workspace grows several times early on
            rows = max(1, int(2 ** (14 * (i + 1) / 40)) - rng.randint(0, 3))
        elif rng.random() < 0.4:
            rows = rng.choice(SWEEP_ROWS)
        else:
            rows = rng.choice((rng.randint(1, 16384), int(2 ** rng.uniform(0, 14))))
        K, N = rng.choice(SWEEP_DIMS), rng.choice(SWEEP_DIMS)
        R = W * -(-rows // W)  # AG: W*m total rows (m = ceil(rows / W)); RS: M divisible by W
        if 2.0 * R * K * N > SWEEP_MAX_FLOPS or _sweep_bytes(op, rows, K, N, W) > SWEEP_MAX_BYTES:
            skipped += 1
            continue
        bias = rng.random() < 0.3
        gathered = op == "ag" and rng.random() < 0.3
        use_out = rng.random() < 0.5
        burst = rng.random() < 0.2  # issued back to back with the next call, checked after both
        draws.append(dict(op=op, rows=rows, K=K, N=N, bias=bias, gathered=gathered, use_out=use_out, burst=burst))
    return draws, skipped


def _sweep(rank, world_size):
    import fluxlite

    W = world_size
    draws, skipped = _sweep_draws(W)
    gen = torch.Generator(device=_dev()).manual_seed(SEED + 17 * rank)
    failures = []
    pending = []  # issued, not yet checked: (index, draw, a, w, b, out, gathered)
    capacities = []
    slowest = (0.0, None)
    issued = 0
    t_start = time.monotonic()

    def check_pending():
        # The references are NCCL collectives on the main stream, after every pending fused call.
        for i, d, a, w, b, out, g in pending:
            name = f"call {i}: {d['op']} rows={d['rows']} K={d['K']} N={d['N']} bias={d['bias']} gathered={d['gathered']}"
            prev = torch.backends.cuda.matmul.allow_tf32
            # bf16 operands are exact in TF32 (10 mantissa bits) and products accumulate in fp32: the
            # float32 reference at tensor-core speed.
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                if d["op"] == "ag":
                    ref, ref_g = _ag_reference(a, w, b)
                    if g is not None and not torch.equal(g, ref_g):
                        failures.append(f"{name}: gathered input differs from all_gather(a)")
                    del ref_g
                else:
                    ref = _rs_reference(a, w, b)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev
            err = _rel_err32(out, ref)
            del ref
            if not err < TOL:
                failures.append(f"{name}: rel err {err:.3g}")
        pending.clear()

    for i, d in enumerate(draws):
        op, rows, K, N = d["op"], d["rows"], d["K"], d["N"]
        m = -(-rows // W)
        if op == "ag":
            a, w = _operands(gen, m, K, N)
            b = torch.randn(N, generator=gen, device=_dev()).to(BF16) if d["bias"] else None
            out = torch.full((W * m, N), NAN, dtype=BF16, device=_dev()) if d["use_out"] else None
        else:
            a, w = _operands(gen, W * m, K, N)
            b = None
            if d["bias"]:
                b = torch.randn(N, generator=gen, device=_dev()).to(BF16)
                dist.broadcast(b, 0)
            out = torch.full((m, N), NAN, dtype=BF16, device=_dev()) if d["use_out"] else None
        t0 = time.monotonic()
        try:
            if op == "ag":
                res = fluxlite.ag_gemm(a, w, b, impl="fused", return_gathered=d["gathered"], out=out,
                                       timeout=SWEEP_TIMEOUT_S)
                res, g = res if d["gathered"] else (res, None)
            else:
                res, g = fluxlite.gemm_rs(a, w, b, impl="fused", out=out, timeout=SWEEP_TIMEOUT_S), None
            if not d["burst"]:
                fluxlite.synchronize()
        except Exception as exc:
            failures.append(f"call {i}: {d}: raised {type(exc).__name__}: {exc}")
            break  # the workspace is poisoned; a rank that went on would wait on the other forever
        issued += 1
        elapsed = time.monotonic() - t0
        if elapsed > slowest[0]:
            slowest = (elapsed, f"call {i} {op} rows={rows} K={K} N={N}")
        if out is not None and res is not out:
            failures.append(f"call {i}: {d}: the result is not the out= tensor")
        pending.append((i, d, a, w, b, res, g))
        ws = fluxlite.get_workspace()
        if not capacities or ws.capacity != capacities[-1]:
            capacities.append(ws.capacity)
        if not d["burst"] or len(pending) >= 3:
            try:
                fluxlite.synchronize()
            except Exception as exc:
                failures.append(f"call {i} (synchronize after a burst): raised {type(exc).__name__}: {exc}")
                break
            check_pending()
    else:
        fluxlite.synchronize()
        check_pending()
    total = time.monotonic() - t_start
    n_ag = sum(d["op"] == "ag" for d in draws)
    if rank == 0:
        ag = [d for d in draws if d["op"] == "ag"]
        rs = [d for d in draws if d["op"] == "rs"]
        print(
            f"\nliveness sweep (seed {SEED}): {issued} of {len(draws)} fused calls made ({n_ag} ag_gemm, "
            f"{len(draws) - n_ag} gemm_rs, "
            f"{sum(d['burst'] for d in draws)} issued back to back) at W={W} in {total:.1f} s; "
            f"AG total rows {min(W * -(-d['rows'] // W) for d in ag)}..{max(W * -(-d['rows'] // W) for d in ag)}, "
            f"RS M {min(W * -(-d['rows'] // W) for d in rs)}..{max(W * -(-d['rows'] // W) for d in rs)}, "
            f"K {min(d['K'] for d in draws)}..{max(d['K'] for d in draws)}, "
            f"N {min(d['N'] for d in draws)}..{max(d['N'] for d in draws)}, "
            f"max {max(2.0 * W * -(-d['rows'] // W) * d['K'] * d['N'] for d in draws):.3g} FLOPs per rank and call "
            f"({skipped} draws over the caps skipped); workspace capacities {capacities}; "
            f"slowest call {slowest[0]:.2f} s ({slowest[1]}); {len(failures)} failures",
            flush=True,
        )
    assert not failures, f"rank {rank}: {len(failures)} failing calls of {len(draws)} (seed {SEED}):\n" + "\n".join(
        failures[:60])


def test_liveness_sweep():
    run_gpu_ranks(_sweep, 2, limit_s=420)


# ---- 3. a missing peer at every point of a call's life -------------------------------------------

PEER_TIMEOUT_S = 3.0
PEER_SLACK_S = 5.0


def _expect_timeout(rank, tag, fn, skipper, failures, *, step_is_flag=None, poison_at_once=True, what=None):
    """``fn()`` then ``fluxlite.synchronize()`` raise FluxliteTimeoutError naming ``skipper`` (and
    waiting for ``what``, if given) within the timeout + slack; afterwards the workspace is
    poisoned: the next fused call raises at once (``poison_at_once=False``, for a workspace whose
    build never finished: at once or after its own timeout)."""
    import fluxlite

    t0 = time.monotonic()
    try:
        fn()
        fluxlite.synchronize()
    except fluxlite.FluxliteTimeoutError as exc:
        elapsed = time.monotonic() - t0
        if elapsed > PEER_TIMEOUT_S + PEER_SLACK_S:
            failures.append(f"{tag}: raised after {elapsed:.2f} s, timeout {PEER_TIMEOUT_S} s: {exc}")
        if (exc.rank, exc.peer) != (rank, skipper) or f"peer rank {skipper}" not in str(exc):
            failures.append(f"{tag}: names rank {exc.rank}, peer {exc.peer}; expected rank {rank}, peer {skipper}: {exc}")
        if step_is_flag is not None and (exc.step == "flag") != step_is_flag:
            failures.append(f"{tag}: step={exc.step!r}, expected {'flag' if step_is_flag else 'a workspace step'}: {exc}")
        if what is not None and exc.what != what:
            failures.append(f"{tag}: waited for {exc.what!r}, expected {what!r}: {exc}")
        print(f"rank {rank}: {tag}: FluxliteTimeoutError after {elapsed:.2f} s (step {exc.step!r})", flush=True)
    except Exception as exc:
        failures.append(f"{tag}: raised {type(exc).__name__} after {time.monotonic() - t0:.2f} s, expected "
                        f"FluxliteTimeoutError: {exc}")
        return
    else:
        failures.append(f"{tag}: no error after {time.monotonic() - t0:.2f} s, expected FluxliteTimeoutError")
        return
    # Poisoned: the next fused call raises at once (it does not wait for the missing peer).
    t0 = time.monotonic()
    try:
        a = torch.randn(64, 256, device=_dev()).to(BF16)
        fluxlite.ag_gemm(a, a[:128], impl="fused", timeout=PEER_TIMEOUT_S)
        fluxlite.synchronize()
    except fluxlite.FluxliteError:
        limit = 2.0 if poison_at_once else PEER_TIMEOUT_S + PEER_SLACK_S
        if time.monotonic() - t0 > limit:
            failures.append(f"{tag}: the next fused call took {time.monotonic() - t0:.2f} s to raise (limit {limit:g} s)")
    else:
        failures.append(f"{tag}: the next fused call did not raise: the workspace is not poisoned")


def _recover(rank, world_size, gen, tag, failures, meet, calls=((256, 1024, 768), (96, 512, 1000))):
    """After a failure: sequential works; release_workspaces() on both ranks; fused calls are correct."""
    import fluxlite

    a = torch.randn(40, 256, device=_dev()).to(BF16)
    w = torch.randn(96, 256, device=_dev()).to(BF16)
    ref, _ = _ag_reference(a, w, None)
    err = rel_err(fluxlite.ag_gemm(a, w, impl="sequential"), ref)
    if not err < TOL:
        failures.append(f"{tag}: sequential AG after the failure: rel err {err:.3g}")
    fluxlite.release_workspaces()
    meet(f"{tag}/released")
    for m, K, N in calls:
        try:
            _check_ag(gen, m, K, N, bias=True, tag=f"{tag}/recovered")
            _check_rs(gen, world_size * m, K, N, bias=True, tag=f"{tag}/recovered")
        except AssertionError as exc:
            failures.append(str(exc))


def _scenario(rank, world_size, meet, gen, failures, tag, skipper, fn, instead=None, **kw):
    """The waiting rank runs ``fn`` (must time out naming ``skipper``); the skipper runs ``instead()``,
    if given, then waits on the store."""
    if rank == skipper:
        if instead is not None:
            instead()
            torch.cuda.synchronize()
        meet(f"{tag}/done", timeout_s=PEER_TIMEOUT_S + PEER_SLACK_S + 60)
    else:
        _expect_timeout(rank, tag, fn, skipper, failures, **kw)
        meet(f"{tag}/done")
    _recover(rank, world_size, gen, tag, failures, meet)


def _layers(seed):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=BF16)
    torch.manual_seed(seed)
    init = torch.nn.init.xavier_normal_
    col = ColumnParallelLinear(1024, 4096, config=cfg, init_method=init, bias=True, gather_output=False,
                               overlap="fused")
    row = RowParallelLinear(4096, 1024, config=cfg, init_method=init, bias=True, input_is_parallel=True,
                            skip_bias_add=False, overlap="fused")
    # A frozen Column weight: its backward gathers no input for wgrad, so the backward is fluxlite's
    # fused ops only. That re-gather is a c10d collective, whose missing peer is c10d's timeout to end.
    col.weight.requires_grad_(False)
    return col, row


def _missing_peer(rank, world_size):
    import fluxlite

    W = world_size
    meet = _Meet(rank, W)
    gen = torch.Generator(device=_dev()).manual_seed(500 + rank)
    failures = []

    def big_call(op, K, N):
        """A call whose data alone exceeds the workspace's capacity: it must grow it (collectively)."""
        cap = fluxlite.get_workspace().capacity
        rows = W * (cap // (2 * (K if op == "ag" else N) * W) + 64)
        a, w = _operands(gen, rows, K, N)
        if op == "ag":
            return lambda: fluxlite.ag_gemm(a, w, impl="fused", timeout=PEER_TIMEOUT_S)
        return lambda: fluxlite.gemm_rs(a, w, impl="fused", timeout=PEER_TIMEOUT_S)

    # (a) before the first fused call of the process: the waiting rank's first call builds the workspace
    a0, w0 = _operands(gen, 512, 1024, 768)
    _scenario(rank, W, meet, gen, failures, "before the first call (ag_gemm)", 1,
              lambda: fluxlite.ag_gemm(a0, w0, impl="fused", timeout=PEER_TIMEOUT_S), step_is_flag=False,
              poison_at_once=False)
    # (b) during growth: both ranks made small fused calls (the recovery's); the waiting rank's next must grow
    for op, skipper in (("rs", 0), ("ag", 1)):
        _scenario(rank, W, meet, gen, failures, f"during growth ({op})", skipper, big_call(op, 512, 1024),
                  step_is_flag=False)
    # (c) mid-call, at a flag: both ranks make one call of the shape, then the skipper skips the next one
    for op, skipper in (("ag", 1), ("rs", 0)):
        a, w = _operands(gen, 1024 if op == "ag" else 2048, 2048, 1024)
        fused = getattr(fluxlite, "ag_gemm" if op == "ag" else "gemm_rs")
        fused(a, w, impl="fused", timeout=15)  # both ranks (a first use may compile a kernel: a long timeout)
        fluxlite.synchronize()
        _scenario(rank, W, meet, gen, failures, f"mid-call ({op})", skipper,
                  lambda: fused(a, w, impl="fused", timeout=PEER_TIMEOUT_S), step_is_flag=True)
    # (d) GEMM-AllReduce, a peer gone after its partials: the waiting rank's reduction completes, but
    # the peer never sends its reduced splits nor sets their flags. A stream wait on them would never end
    # (synchronize() could only report a stuck GPU); the gather's bounded kernel must time out naming
    # the peer and the first flag it waits for.
    from fluxlite.host_flags import REDUCED_ROWS
    from fluxlite.ops import AR

    # 8192 x 4096 bf16 partials: over the one-shot budget, so the call is two-shot (a one-shot call
    # sets its finished flags in its reduction kernel, with no end to skip)
    a, w = _operands(gen, 8192, 1024, 4096)
    assert not AR.one_shot(W, 8192, 4096, 2)
    fluxlite.gemm_ar(a, w, impl="fused", timeout=15)  # both ranks: kernels compiled and loaded
    fluxlite.synchronize()
    call = lambda: fluxlite.gemm_ar(a, w, impl="fused", timeout=PEER_TIMEOUT_S)  # noqa: E731
    _scenario(rank, W, meet, gen, failures, "gemm_ar peer gone after its partials", 0, call,
              instead=lambda: never_finished(call), step_is_flag=True, what=REDUCED_ROWS)
    # (e) during the backward of Column -> GELU -> Row (sequence parallel, fused both ways)
    _skipped_backward(rank, meet, gen, failures, "during backward (Column -> GELU -> Row)", seed=1234, steps=1)
    meet("end")
    assert not failures, f"rank {rank}: {len(failures)} failures:\n" + "\n".join(failures)


def test_missing_peer_at_each_point():
    run_gpu_ranks(_missing_peer, 2, limit_s=300)


def _skipped_backward(rank, meet, gen, failures, tag, *, seed, steps, until=None, max_steps=12):
    """``steps`` whole steps of Column -> GELU -> Row (sequence parallel, fused both ways) on both
    ranks under the default (long) timeout, so every kernel the layers use is compiled and loaded
    before the short one applies; with ``until``, more steps (all ranks alike, at most
    ``max_steps``) until ``until()`` holds on every rank, and then it must; then a forward on both
    ranks, whose backward rank 0 skips: rank 1's must time out naming rank 0 (:func:`_scenario`)."""
    import fluxlite

    W = dist.get_world_size()
    col, row = _layers(seed)
    x = torch.randn(1024 // W, 2, 1024, device=_dev()).to(BF16).requires_grad_()
    done = 0
    while done < steps or (until is not None and done < max_steps and not meet.all_agree(until())):
        y = row(torch.nn.functional.gelu(col(x)[0]))[0]
        y.backward(torch.ones_like(y))
        fluxlite.synchronize()
        done += 1
    if until is not None:
        assert until(), f"rank {rank}: not so after {done} steps"
    fluxlite.set_default_timeout(PEER_TIMEOUT_S)  # the layers take no timeout argument
    y = row(torch.nn.functional.gelu(col(x)[0]))[0]
    fluxlite.synchronize()
    if rank == 0:
        del y  # rank 0 skips the backward
    _scenario(rank, W, meet, gen, failures, tag, 0, lambda: y.backward(torch.ones_like(y)))
    fluxlite.set_default_timeout(None)


def _missing_peer_in_replayed_backward(rank, world_size):
    """The backward of Column -> GELU -> Row after steps whose calls replay from their own graphs
    (the AG pull calls too: the Row's dgrad, which keeps the gathered grad): a peer that skips it gives
    the timeout. This backward hung the GPU in 8 of 20 runs in shared mode before the kernels' waits
    took one timer reading per program (fluxlite.kernels.device_flags.program_time)."""
    import fluxlite
    from fluxlite.fused.state import Replay
    from fluxlite.ops.ag_gemm import PULL

    meet = _Meet(rank, world_size)
    gen = torch.Generator(device=_dev()).manual_seed(700 + rank)
    failures = []

    def pull_calls_replay() -> bool:
        plans = fluxlite.fused.state_of(fluxlite.get_workspace()).plans
        pulls = [g for key, p in plans.items() if key[0] == "ag_gemm" and key[5] == PULL for g in p.bound.graphs.values()]
        return any(isinstance(g, Replay) for g in pulls)

    # The calls' tensors recur (the allocator hands the same blocks back, mostly from the second step
    # on): a key's second sighting captures, its third replays.
    _skipped_backward(rank, meet, gen, failures, "during a replayed backward", seed=4321, steps=3,
                      until=pull_calls_replay)
    meet("end")
    assert not failures, f"rank {rank}: {len(failures)} failures:\n" + "\n".join(failures)


def test_missing_peer_in_a_backward_replayed_from_graphs():
    run_gpu_ranks(_missing_peer_in_replayed_backward, 2, limit_s=180)


# ---- 4. recovery after a timeout -----------------------------------------------------------------


def _recovery(rank, world_size):
    import fluxlite

    W = world_size
    meet = _Meet(rank, W)
    gen = torch.Generator(device=_dev()).manual_seed(900 + rank)
    failures = []
    _check_ag(gen, 512, 1024, 1024, tag="warm-up")
    _check_rs(gen, 1024, 1024, 1024, tag="warm-up")
    a, w = _operands(gen, 512, 1024, 1024)
    if rank == 1:  # rank 1 skips this call
        meet("timed out", timeout_s=PEER_TIMEOUT_S + PEER_SLACK_S + 60)
    else:
        _expect_timeout(rank, "mid-call (ag)", lambda: fluxlite.ag_gemm(a, w, impl="fused", timeout=PEER_TIMEOUT_S),
                        1, failures, step_is_flag=True)
        meet("timed out")
    assert not failures, f"rank {rank}: " + "\n".join(failures)
    # 20 fused calls of both ops, varied shapes (ragged, growing past the warm-up's workspace and back)
    shapes = [(1, 256, 64), (7, 1000, 100), (129, 1024, 1024), (1000, 4096, 2048), (1025, 5120, 1000),
              (3000, 8192, 4096), (4096, 8192, 14336), (64, 64, 64), (513, 2048, 5120), (2048, 14336, 8192)]
    fluxlite.release_workspaces()
    meet("released")
    for i, (m, K, N) in enumerate(shapes):
        try:
            _check_ag(gen, m, K, N, bias=i % 2 == 0, gathered=i % 3 == 0, tag=f"recovered call {2 * i}")
            _check_rs(gen, W * m, K, N, bias=i % 2 == 1, tag=f"recovered call {2 * i + 1}")
        except AssertionError as exc:
            failures.append(str(exc))
    meet("end")
    assert not failures, f"rank {rank}: {len(failures)} failures after recovery:\n" + "\n".join(failures)


def test_recovery_after_timeout():
    run_gpu_ranks(_recovery, 2, limit_s=240)


# ---- 5. ranks in different calls -----------------------------------------------------------------

MISMATCH_TIMEOUT_S = 20.0  # a disagreement must surface in well under half of this, never as a timeout
FP16 = torch.float16
# (name, what the other ranks call, what the odd rank calls): op, then rows, K, N, dtype, return_gathered.
# Every variant fits in the workspace the warm-up leaves, so only the calls differ, never the need to grow.
_AG, _RS = ("ag", 512, 1024, 768, BF16, False), ("rs", 1024, 1024, 768, BF16, False)
MISMATCHES = [
    ("ag m", _AG, ("ag", 520, 1024, 768, BF16, False)),
    ("ag K", _AG, ("ag", 512, 1032, 768, BF16, False)),
    ("ag N_local", _AG, ("ag", 512, 1024, 776, BF16, False)),
    ("ag dtype", _AG, ("ag", 512, 1024, 768, FP16, False)),
    ("ag return_gathered", _AG, ("ag", 512, 1024, 768, BF16, True)),
    ("rs M", _RS, ("rs", 1040, 1024, 768, BF16, False)),
    ("rs K_local", _RS, ("rs", 1024, 1032, 768, BF16, False)),
    ("rs N", _RS, ("rs", 1024, 1024, 776, BF16, False)),
    ("op ag vs rs", _AG, ("rs", 1024, 1024, 768, BF16, False)),
]
_WARM = (1024, 2048, 1024)  # (m, K, N) of the checked calls before each scenario: room for every variant


def _mismatched_call(spec, gen) -> None:
    import fluxlite

    op, rows, K, N, dtype, gathered = spec
    a = torch.randn(rows, K, generator=gen, device=_dev()).to(dtype)
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(dtype)
    if op == "ag":
        fluxlite.ag_gemm(a, w, impl="fused", return_gathered=gathered, timeout=MISMATCH_TIMEOUT_S)
    else:
        fluxlite.gemm_rs(a, w, impl="fused", timeout=MISMATCH_TIMEOUT_S)
    fluxlite.synchronize()


def _mismatches(rank, world_size):
    """Each scenario: one rank calls something else; every rank raises FluxliteCallMismatchError naming
    itself and a peer, promptly (the kernels compare the call signatures before reading a peer's data);
    the workspace is poisoned; after release_workspaces() fused calls are correct again."""
    import fluxlite

    meet = _Meet(rank, world_size)
    gen = torch.Generator(device=_dev()).manual_seed(SEED + rank)
    failures = []
    m, K, N = _WARM
    _check_ag(gen, m, K, N, tag="warm-up")
    _check_rs(gen, world_size * m, K, N, tag="warm-up")
    for i, (name, base, odd_spec) in enumerate(MISMATCHES):
        odd = i % world_size
        tag = f"mismatch '{name}' (odd rank {odd})"
        t0 = time.monotonic()
        try:
            _mismatched_call(odd_spec if rank == odd else base, gen)
        except fluxlite.FluxliteCallMismatchError as exc:
            elapsed = time.monotonic() - t0
            if elapsed > MISMATCH_TIMEOUT_S / 2:
                failures.append(f"{tag}: raised after {elapsed:.2f} s (timeout {MISMATCH_TIMEOUT_S:g} s): {exc}")
            if exc.rank != rank or exc.peer == rank or not 0 <= exc.peer < world_size or exc.mine == exc.theirs:
                failures.append(f"{tag}: names rank {exc.rank}, peer {exc.peer}, mine={exc.mine!r}, "
                                f"theirs={exc.theirs!r}: {exc}")
            print(f"rank {rank}: {tag}: FluxliteCallMismatchError after {elapsed:.2f} s", flush=True)
        except Exception as exc:
            failures.append(f"{tag}: raised {type(exc).__name__} after {time.monotonic() - t0:.2f} s, expected "
                            f"FluxliteCallMismatchError: {exc}")
        else:
            failures.append(f"{tag}: no error after {time.monotonic() - t0:.2f} s: a result computed from another call")
        try:  # poisoned: the next fused call raises at once, without waiting on anyone
            t0 = time.monotonic()
            _mismatched_call(base, gen)
            failures.append(f"{tag}: the next fused call did not raise: the workspace is not poisoned")
        except fluxlite.FluxliteError:
            if time.monotonic() - t0 > 2.0:
                failures.append(f"{tag}: the next fused call took {time.monotonic() - t0:.2f} s to raise")
        meet(f"{tag}/done")
        _recover(rank, world_size, gen, tag, failures, meet, calls=(_WARM,))
    meet("end")
    assert not failures, f"rank {rank}: {len(failures)} failures:\n" + "\n".join(failures)


def test_ranks_in_different_calls_raise_a_mismatch_on_every_rank():
    run_gpu_ranks(_mismatches, 2, limit_s=300)
