"""GPU tests (2 GPUs, NCCL): the CUDA workspace, the sequential impl, and the fused AG-GEMM and
GEMM-RS kernels. Run on the lent 2xH200 with ``scripts/gpu_suite.sh tests``.

Tolerance: relative Frobenius error ``||out - ref|| / ||ref|| < 1e-2`` against a float32 reference
computed from the same bf16 operands (bf16 output rounding alone is ~3e-3). Outputs are poisoned
with NaN before every run; a NaN left behind fails the check.
"""

from __future__ import annotations

import ctypes
import functools
import random
import time

import pytest
import torch
import torch.distributed as dist

from .gpu_utils import ag_epilogue_reference, ag_reference as _ag_reference, dev as _dev, rs_reference as _rs_reference, rel_err, run_gpu_ranks

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
TOL = 1e-2
# (M total rows, K, N_local) for AG; (M, K_local, N) for RS. Llama-3-70B's per-rank shapes at TP=2 plus ragged ones.
AG_SHAPES = [(8192, 8192, 14336), (8192, 8192, 5120), (4096, 8192, 14336), (16384, 8192, 4096),
             (2000, 5120, 1376), (8200, 5120, 1376), (154, 256, 200)]
RS_SHAPES = [(8192, 14336, 8192), (8192, 5120, 8192), (4096, 14336, 8192), (16384, 4096, 8192),
             (2000, 1376, 5120), (8200, 1376, 5120), (154, 256, 200)]





def _check_ag(m, K, N, with_bias, gen):
    import fluxlite

    a = torch.randn(m, K, generator=gen, device=_dev()).to(BF16)
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    b = torch.randn(N, generator=gen, device=_dev()).to(BF16) if with_bias else None
    ref, ref_gathered = _ag_reference(a, w, b)
    outs = []
    for _ in range(2):
        out = torch.full((dist.get_world_size() * m, N), float("nan"), dtype=BF16, device=_dev())
        res, gathered = fluxlite.ag_gemm(a, w, b, impl="fused", return_gathered=True, out=out)
        fluxlite.synchronize()
        assert res is out
        err = rel_err(out, ref)
        assert err < TOL, f"AG m={m} K={K} N={N} bias={with_bias}: rel err {err:.3g}"
        assert torch.equal(gathered, ref_gathered), "gathered input differs from all_gather(a)"
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "AG results differ between two calls on the same inputs"


def _check_rs(M, K, N, with_bias, gen):
    import fluxlite

    a = torch.randn(M, K, generator=gen, device=_dev()).to(BF16)
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    b = torch.randn(N, device=_dev()).to(BF16) if with_bias else None
    if b is not None:
        dist.broadcast(b, 0)  # the bias is replicated
    ref = _rs_reference(a, w, b)
    outs = []
    for _ in range(2):
        out = torch.full((M // dist.get_world_size(), N), float("nan"), dtype=BF16, device=_dev())
        res = fluxlite.gemm_rs(a, w, b, impl="fused", out=out)
        fluxlite.synchronize()
        assert res is out
        err = rel_err(out, ref)
        assert err < TOL, f"RS M={M} K={K} N={N} bias={with_bias}: rel err {err:.3g}"
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "RS results differ between two calls on the same inputs"


def _fused_shapes(rank, world_size):
    gen = torch.Generator(device=_dev()).manual_seed(100 + rank)
    # The very first fluxlite call of this fresh process is a fused one (no warm-up by the caller).
    for M, K, N in AG_SHAPES:
        for with_bias in (False, True):
            _check_ag(M // world_size, K, N, with_bias, gen)
    for M, K, N in RS_SHAPES:
        for with_bias in (False, True):
            _check_rs(M, K, N, with_bias, gen)


def test_fused_matches_reference_on_anchor_and_ragged_shapes():
    run_gpu_ranks(_fused_shapes, 2, env={"CUDA_MODULE_LOADING": "LAZY"})


def _first_call(rank, world_size):
    gen = torch.Generator(device=_dev()).manual_seed(7 + rank)
    _check_rs(1024, 512, 768, True, gen)  # RS first: its producer waits on the GEMM's own counters
    _check_ag(512, 512, 768, True, gen)


def test_first_call_in_fresh_process_with_lazy_module_loading():
    run_gpu_ranks(_first_call, 2, env={"CUDA_MODULE_LOADING": "LAZY"})


def _thousand_calls(rank, world_size):
    import fluxlite

    shapes = random.Random(2024)  # same sequence on every rank: the ops are collectives
    gen = torch.Generator(device=_dev()).manual_seed(rank)
    K, N = 1024, 768
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    b = torch.randn(N, device=_dev()).to(BF16)
    dist.broadcast(b, 0)
    ws = fluxlite.get_workspace()
    for i in range(1000):
        m = shapes.choice([1, 17, 64, 128, 200, 256, 511, 1024, 1500])
        a_ag = torch.randn(m, K, generator=gen, device=_dev()).to(BF16)
        out = fluxlite.ag_gemm(a_ag, w, b, impl="fused")
        ref, _ = _ag_reference(a_ag, w, b)
        assert rel_err(out, ref) < TOL, f"call {i}: AG m={m}"
        a_rs = torch.randn(world_size * m, K, generator=gen, device=_dev()).to(BF16)
        out = fluxlite.gemm_rs(a_rs, w, b, impl="fused")
        assert rel_err(out, _rs_reference(a_rs, w, b)) < TOL, f"call {i}: RS m={m}"
        if i % 7 == 0:  # an odd call now and then: every plan meets both parities (flag regions, data halves)
            assert rel_err(fluxlite.ag_gemm(a_ag, w, b, impl="fused"), ref) < TOL, f"call {i}: extra AG m={m}"
    fluxlite.synchronize()
    state = fluxlite.fused.state_of(ws)
    assert state.epoch == 2000 + len(range(0, 1000, 7))
    # Every plan of the Triton kernel launched it directly after the first call (Triton's per-call
    # binding skipped), one compiled kernel whichever parity's flag region it got. The small AG-GEMMs
    # (rows pushed by the SMs, one cuBLAS GEMM) have no kernel of their own: the push and the wait are
    # the state's.
    kernels = {key: (plan.consumer, len(plan.kernels)) for key, plan in state.plans.items()}
    assert all(n == 1 for consumer, n in kernels.values() if consumer == "triton"), kernels
    assert any(consumer == "torch" and key[0] == "ag_gemm" for key, (consumer, _) in kernels.items()), kernels
    assert len(state.push_kernels) == 1, "one compiled push kernel, warmed up when the state was made"


def test_thousand_back_to_back_calls_with_varying_m():
    run_gpu_ranks(_thousand_calls, 2)


def _small_chunks(rank, world_size):
    """AG-GEMM's small chunks, whose rows the SMs push ahead of one cuBLAS GEMM (AllGatherGemm.pushes_by_sm),
    at random shapes on both sides of its bounds (AllGatherGemm.small_call; 30000 output columns put
    chunks of 129 and 300 rows over the tiles' bound, where cut_rereads_weight decides): every activation, a bias
    or not, rows from a view whose start is off 16 bytes (copied first) or not. Each case three times
    on the same tensors
    with fresh data copied in and the output poisoned (eager on both data halves, then captured into
    the call's own graph and launched from it), against float32."""
    import fluxlite
    from fluxlite import epilogue
    from fluxlite.ops import AG

    rng = random.Random(77)  # the same cases on every rank: the ops are collectives
    gen = torch.Generator(device=_dev()).manual_seed(300 + rank)
    pushed, expected = [], 0
    push_by_sm = type(AG)._push_by_sm
    type(AG)._push_by_sm = lambda self, call, a, **kw: (pushed.append(kw), push_by_sm(self, call, a, **kw))[1]
    try:
        for case in range(20):
            m, K = rng.choice([1, 2, 7, 64, 129, 300, 1100]), 8 * rng.randint(1, 512)
            N, act = rng.choice([8, 40, 1000, 2056, 30000]), rng.choice(epilogue.ACTIVATIONS)
            ep = epilogue.Epilogue(act)
            with_bias, offset = rng.random() < 0.5, rng.choice([0, 1])
            w_rows = 2 * N if ep.gated else N
            w = (torch.randn(w_rows, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
            dist.broadcast(w, 0)
            b = torch.randn(w_rows, generator=gen, device=_dev()).to(BF16) if with_bias else None
            base = torch.empty(m * K + offset, dtype=BF16, device=_dev())
            a = base[offset:].view(m, K)
            out = torch.empty(world_size * m, N, dtype=BF16, device=_dev())
            expected += 3 * AG.small_call(world_size, m, K, N, 2)
            for call in range(3):
                a.copy_(torch.randn(m, K, generator=gen, device=_dev()))
                out.fill_(float("nan"))
                res = fluxlite.ag_gemm(a, w, b, impl="fused", activation=act, out=out)
                ref, _ = ag_epilogue_reference(a, w, b, None, ep)
                err = rel_err(res, ref)
                assert res is out and err < (2e-2 if ep.gated else TOL), \
                    f"case {case} call {call}: m={m} K={K} N={N} {act} bias={with_bias} offset={offset}: {err:.3g}"
    finally:
        type(AG)._push_by_sm = push_by_sm
    fluxlite.synchronize()
    assert len(pushed) == expected and 0 < expected < 60, (len(pushed), expected)
    assert all(kw["to_self"] for kw in pushed), "a forced fused call of a small chunk runs one GEMM over every row"


def test_small_chunks_pushed_by_the_sms_at_random_shapes():
    run_gpu_ranks(_small_chunks, 2)


def _small_rs_calls(rank, world_size):
    """GEMM-RS's one shot (GemmReduceScatter.one_shot: cuBLAS's whole partial into the workspace, then
    one reduction of this rank's rows of every partial) at random shapes on both sides of its bound:
    one row a rank up to thousands, N off 8 or not (a large call then on whole output rows,
    GemmReduceScatter.output_columns), a bias or a scale or neither. Each case three
    times on the same tensors with fresh data copied in and the output poisoned (eager on both data
    halves, then launched from the call's own graph), against float32."""
    import fluxlite
    from fluxlite.ops import RS

    rng = random.Random(78)  # the same cases on every rank: the ops are collectives
    gen = torch.Generator(device=_dev()).manual_seed(400 + rank)
    shots, expected = [], 0
    one_shot = type(RS)._one_shot
    type(RS)._one_shot = lambda self, *args: (shots.append(1), one_shot(self, *args))[1]
    try:
        for case in range(20):
            m = rng.choice([1, 3, 8, 64, 300, 1100, 4096])
            K = rng.choice([8 * rng.randint(1, 1024), rng.randint(1, 3000)])
            N, scale = rng.choice([8, 40, 1000, 1001, 2056, 8192]), rng.choice([None, 0.5])
            w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
            b = torch.randn(N, generator=gen, device=_dev()).to(BF16) if rng.random() < 0.5 else None
            if b is not None:
                dist.broadcast(b, 0)
            a = torch.empty(world_size * m, K, dtype=BF16, device=_dev())
            out = torch.empty(m, N, dtype=BF16, device=_dev())
            expected += 3 * RS.one_shot(world_size, world_size * m, RS.output_columns(world_size * m, K, N, 2), 2)
            for call in range(3):
                a.copy_(torch.randn(world_size * m, K, generator=gen, device=_dev()))
                out.fill_(float("nan"))
                res = fluxlite.gemm_rs(a, w, b, impl="fused", out=out, scale=scale)
                ref = _rs_reference(a, w, None) * (1.0 if scale is None else scale)
                if b is not None:
                    ref = ref + b.float()
                err = rel_err(res, ref)
                assert res is out and err < TOL, f"case {case} call {call}: m={m} K={K} N={N} scale={scale}: {err:.3g}"
    finally:
        type(RS)._one_shot = one_shot
    fluxlite.synchronize()
    assert len(shots) == expected and 0 < expected < 60, (len(shots), expected)


def test_small_gemm_rs_in_one_shot_at_random_shapes():
    run_gpu_ranks(_small_rs_calls, 2)


def _recurring_calls(rank, world_size):
    """Eager calls whose tensors come back (a training loop's) replay their work from a CUDA graph
    captured the second time (fluxlite.fused.call.Call.run); each call's fresh data in those tensors
    must give that call's result, on both parities, with a ragged m; GEMM-RS on both of its paths
    (one shot, and a call over its bound)."""
    import fluxlite
    from fluxlite.ops.ag_gemm import PULL, SM_PUSH
    from fluxlite.ops.gemm_rs import ONE_SHOT, ONE_SHOT_MAX_BYTES

    gen = torch.Generator(device=_dev()).manual_seed(11 + rank)
    m, K, N = 200, 1024, 768
    m_big = ONE_SHOT_MAX_BYTES // (2 * N * (world_size - 1)) + 8  # GEMM-RS rows a rank past the one shot's bound
    a_big = torch.empty(world_size * m_big, K, dtype=BF16, device=_dev())
    out_big = torch.empty(m_big, N, dtype=BF16, device=_dev())
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    b = torch.randn(N, device=_dev()).to(BF16)
    dist.broadcast(b, 0)
    a, a_rs = torch.empty(m, K, dtype=BF16, device=_dev()), torch.empty(world_size * m, K, dtype=BF16, device=_dev())
    out, out_rs = torch.empty(world_size * m, N, dtype=BF16, device=_dev()), torch.empty(m, N, dtype=BF16, device=_dev())
    for i in range(30):
        a.copy_(torch.randn(m, K, generator=gen, device=_dev()))
        a_rs.copy_(torch.randn(world_size * m, K, generator=gen, device=_dev()))
        out.fill_(float("nan"))
        out_rs.fill_(float("nan"))
        fluxlite.ag_gemm(a, w, b, impl="fused", out=out, scale=0.5)
        fluxlite.gemm_rs(a_rs, w, b, impl="fused", out=out_rs)
        ref, gathered_ref = _ag_reference(a, w, None)
        assert rel_err(out, 0.5 * ref + b.float()) < TOL, f"call {i}: AG"
        assert rel_err(out_rs, _rs_reference(a_rs, w, b)) < TOL, f"call {i}: RS"
        a_big.copy_(torch.randn(world_size * m_big, K, generator=gen, device=_dev()))
        out_big.fill_(float("nan"))
        fluxlite.gemm_rs(a_big, w, b, impl="fused", out=out_big)
        assert rel_err(out_big, _rs_reference(a_big, w, b)) < TOL, f"call {i}: RS over the one shot's bound"
        out.fill_(float("nan"))
        # The pull path (a layer backward's): its gathered rows are a new tensor each call.
        _, gathered = fluxlite.ag_gemm(a, w, b, impl="fused", out=out, scale=0.5, return_gathered=True)
        assert rel_err(out, 0.5 * ref + b.float()) < TOL, f"call {i}: AG pull"
        assert torch.equal(gathered, gathered_ref.to(BF16)), f"call {i}: AG pull's gathered rows"
        if i % 3 == 0:  # an odd call now and then: each op meets both parities
            out.fill_(float("nan"))
            fluxlite.ag_gemm(a, w, b, impl="fused", out=out, scale=0.5)
            assert rel_err(out, 0.5 * ref + b.float()) < TOL, f"call {i}: extra AG"
    fluxlite.synchronize()
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    graphs = {(key[0], key[5]): _replays(plan) for key, plan in state.plans.items()}  # (op name, variant)
    assert graphs["ag_gemm", SM_PUSH] >= 2, graphs  # both parities: its tensors never move
    assert graphs["ag_gemm", PULL] >= 2, graphs  # its gathered tensor comes back at a few addresses
    assert graphs["gemm_rs", ""] >= 2, graphs  # its partials are in the state's scratch buffer
    assert graphs["gemm_rs", ONE_SHOT] >= 2, graphs  # its partials are in the workspace


def _auto_by_the_rule(rank, world_size):
    """``auto`` without measuring (``FLUXLITE_AUTO=off``): the rule's choice for each call's shapes
    (fused from ``RULE_MIN_ROWS`` rows and ``RULE_MIN_FLOPS_AT_MIN_ROWS``, sequential below), checked
    once and then repeated as a named call is, eagerly, and the fused ones inside a user's graph
    (ranks sharing a GPU have a gloo group, which a graph cannot capture); every call right on fresh
    data copied into the same tensors, its output poisoned first, against float32."""
    import fluxlite
    from fluxlite import ops

    from .dist_utils import count_runs

    gen = torch.Generator(device=_dev()).manual_seed(23 + rank)
    checks = {"ag": 0, "rs": 0}
    for name, op in (("ag", ops.AG), ("rs", ops.RS)):
        def counting(*args, check=op.check, name=name, **kwargs):
            checks[name] += 1
            return check(*args, **kwargs)

        op.check = counting  # on the op object (this rank's own process)
    runs = {"ag": count_runs(ops.AG), "rs": count_runs(ops.RS)}
    W = world_size
    cases = []  # (op, rows, K, N): fused, fused, sequential by the rule
    for op, rows, K, N in (("ag", 4096 // W, 4096, 4096), ("rs", 4096, 2048, 4096), ("ag", 64, 1024, 1024)):
        w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
        dist.broadcast(w, 0)
        a = torch.empty(rows, K, dtype=BF16, device=_dev())
        out = torch.empty((W * rows if op == "ag" else rows // W), N, dtype=BF16, device=_dev())
        cases.append(dict(op=op, a=a, w=w, out=out, call=functools.partial(
            fluxlite.ag_gemm if op == "ag" else fluxlite.gemm_rs, a, w, impl="auto", out=out)))

    def fresh(case: dict, what: str, run) -> None:
        a, w, out = case["a"], case["w"], case["out"]
        a.copy_(torch.randn(a.shape, generator=gen, device=_dev()))
        out.fill_(float("nan"))
        run()
        fluxlite.synchronize()
        ref = _ag_reference(a, w, None)[0] if case["op"] == "ag" else _rs_reference(a, w, None)
        err = rel_err(out, ref)
        assert err < TOL, f"{what}: {case['op']} {tuple(a.shape)} x {tuple(w.shape)} by the rule: {err:.3g}"

    for case in cases:  # every case eagerly first: a workspace that a graph captured cannot grow
        for i in range(4):
            fresh(case, f"eager call {i}", case["call"])
    for case in cases[:2]:  # the fused ones
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            case["call"]()
        for i in range(3):
            fresh(case, f"replay {i}", graph.replay)
        del graph
    # each case: four eager calls (and a fused one's capture), by the rule's implementation; one full check each
    assert runs == {"ag": {"fused": 5, "sequential": 4}, "rs": {"fused": 5, "sequential": 0}}, runs
    assert checks == {"ag": 2, "rs": 1}, f"every case checked once, its repeats not: {checks}"


def test_auto_by_the_rule_repeats_eagerly_and_in_a_graph():
    run_gpu_ranks(_auto_by_the_rule, 2, env={"FLUXLITE_AUTO": "off"})


def test_recurring_gemm_rs_calls_replay_whatever_else_is_allocated():
    run_gpu_ranks(_recurring_rs_between_allocations, 2)


def _recurring_rs_between_allocations(rank, world_size):
    """A GEMM-RS call made one at a time between other work (a decode step, a profiler's rotation)
    recurs with the same tensors, but whatever else is allocated between the calls moves what the
    allocator would hand out. Its partials live in the state's scratch buffer, so its replay keys
    recur: two graphs in all (one per parity), every result right."""
    import fluxlite

    gen = torch.Generator(device=_dev()).manual_seed(17 + rank)
    M, K, N = world_size * 328, 1536, 1024
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    a = torch.randn(M, K, generator=gen, device=_dev()).to(BF16)
    out = torch.empty(M // world_size, N, dtype=BF16, device=_dev())
    ref = _rs_reference(a, w, None)
    kept = []
    for i in range(16):
        # other work's allocations, some kept: sizes near the partials' (M x N) and not
        kept.append(torch.empty(int(M * N * random.Random(i).uniform(0.5, 1.5)), dtype=BF16, device=_dev()))
        if i % 3 == 0:
            kept.pop(0)
        out.fill_(float("nan"))
        fluxlite.gemm_rs(a, w, impl="fused", out=out)
        assert rel_err(out, ref) < TOL, f"call {i}"
    fluxlite.synchronize()
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    plans = [plan for key, plan in state.plans.items() if key[0] == "gemm_rs"]
    graphs = [len(plan.bound.graphs) for plan in plans]
    assert graphs == [2] and [_replays(plan) for plan in plans] == [2], graphs


def _replays(plan) -> int:
    """How many of ``plan``'s eager calls have a graph to replay from."""
    from fluxlite.fused.state import Replay

    return sum(isinstance(g, Replay) for g in plan.bound.graphs.values())


def _pull_beside_push(rank, W):
    """AG pull and push calls, alternating, every activation and a row scale (each a kernel of its
    own, as a layer stack runs them), with a short timeout: a pull call whose same-device staging
    copy waited behind its own consumer ran into that timeout once in 40-80 such calls."""
    import fluxlite
    from fluxlite import epilogue as E

    gen = torch.Generator(device=_dev()).manual_seed(77)  # the same weights on every rank
    m, K, N = 2048, 8192, 3584
    failures = []
    for rnd in range(6):
        for act in E.ACTIVATIONS:
            w = (torch.randn(2 * N if act == "swiglu" else N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
            a = torch.randn(m, K, device=_dev()).to(BF16)
            s = torch.rand(m, device=_dev()) + 0.5
            ref, _ = ag_epilogue_reference(a, w, None, s, E.Epilogue(act, True, 1.0))
            for gathered in (False, True):
                out = torch.full((W * m, N), float("nan"), dtype=BF16, device=_dev())
                fluxlite.ag_gemm(a, w, impl="fused", return_gathered=gathered, out=out, activation=act, row_scale=s,
                                 timeout=None if rnd == 0 else 10.0)  # the first round compiles
                fluxlite.synchronize()
                err = rel_err(out, ref)
                if not err < (2e-2 if act == "swiglu" else TOL):
                    failures.append(f"round {rnd} act={act} gathered={gathered}: rel err {err:.3g}")
    assert not failures, "\n".join(failures)


def test_pull_calls_beside_push_calls_never_wait_out_their_timeout():
    run_gpu_ranks(_pull_beside_push, 2)


def test_recurring_eager_calls_replay_from_graphs_with_fresh_data():
    run_gpu_ranks(_recurring_calls, 2)


def _recapture_after_growth(rank, world_size):
    """Eager calls replay from graphs; a call grows the workspace (the plans drop their graphs); the
    first calls recur and must be captured again, correct, with no capture failing. torch's allocator
    asserts when a capture reuses a pool whose graphs are all gone, and its RNG is then broken."""
    import warnings

    import fluxlite

    gen = torch.Generator(device=_dev()).manual_seed(31 + rank)
    m, K, N = 136, 512, 384
    a = torch.randn(m, K, generator=gen, device=_dev()).to(BF16)
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    ref, gathered_ref = _ag_reference(a, w, None)
    a_rs = torch.randn(world_size * m, K, generator=gen, device=_dev()).to(BF16)
    ref_rs = _rs_reference(a_rs, w, None)

    out = torch.empty(world_size * m, N, dtype=BF16, device=_dev())
    out_rs = torch.empty(m, N, dtype=BF16, device=_dev())

    def calls(tag):
        for i in range(6):  # both parities' keys recur: captured, then replayed
            out.fill_(float("nan"))
            fluxlite.ag_gemm(a, w, impl="fused", out=out)
            assert rel_err(out, ref) < TOL, f"{tag} {i}: AG"
            out.fill_(float("nan"))
            _, gathered = fluxlite.ag_gemm(a, w, impl="fused", out=out, return_gathered=True)
            assert rel_err(out, ref) < TOL and torch.equal(gathered, gathered_ref), f"{tag} {i}: AG pull"
            del gathered
            out_rs.fill_(float("nan"))
            fluxlite.gemm_rs(a_rs, w, impl="fused", out=out_rs)
            assert rel_err(out_rs, ref_rs) < TOL, f"{tag} {i}: RS"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls("before the growth")
        ws = fluxlite.get_workspace()
        generation = ws.generation
        big = torch.randn(ws.capacity // (2 * K * world_size) + 64, K, device=_dev()).to(BF16)
        fluxlite.ag_gemm(big, w, impl="fused")
        assert fluxlite.get_workspace().generation != generation, "the big call should have grown the workspace"
        calls("after the growth")
        fluxlite.synchronize()
    failed = [str(c.message) for c in caught if "capturing a fused" in str(c.message)]
    assert not failed, failed
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    small = [plan for key, plan in state.plans.items() if key[1] in (m, world_size * m)]
    assert all(_replays(plan) >= 1 for plan in small), [_replays(plan) for plan in small]
    torch.randn(4, device=_dev())  # the RNG still works


def test_eager_replays_are_captured_again_after_a_growth():
    run_gpu_ranks(_recapture_after_growth, 2)


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _cuda(name: str, *args) -> None:
    rc = getattr(_libcuda(), name)(*args)
    assert rc == 0, f"{name} failed: CUresult {rc}"


class _DriverAllocation:
    """``rows x cols`` bf16 of device memory from the driver, not torch's caching allocator
    (:meth:`tensor` views it); :meth:`free` gives it back. Two kinds, the two ways torch's allocator
    gets memory:

    * ``"malloc"``: ``cuMemAlloc``. Freed and allocated again, memory usually comes back at the same
      address as a new allocation (what ``torch.cuda.empty_cache()`` and a new segment do).
    * ``"vmm"``: physical memory (``cuMemCreate``) mapped into an address range reserved once per
      ``reserved`` address; freed, it is unmapped and released, and the next allocation maps new
      physical memory at the same address (what ``expandable_segments`` does)."""

    _reserved: dict[int, int] = {}  # nbytes -> an address range reserved for "vmm" (kept for the process)

    def __init__(self, rows: int, cols: int, kind: str):
        self.shape, self.kind, nbytes = (rows, cols), kind, rows * cols * 2
        ptr = ctypes.c_uint64(0)
        if kind == "malloc":
            _cuda("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
            self.ptr = ptr.value
            return
        device = torch.cuda.current_device()

        class Prop(ctypes.Structure):  # CUmemAllocationProp: pinned device memory, no export handle
            _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location_type", ctypes.c_int),
                        ("location_id", ctypes.c_int), ("win32", ctypes.c_void_p), ("flags", ctypes.c_uint64)]

        class Access(ctypes.Structure):  # CUmemAccessDesc: read-write for this device
            _fields_ = [("location_type", ctypes.c_int), ("location_id", ctypes.c_int), ("flags", ctypes.c_int)]

        prop = Prop(1, 0, 1, device, None, 0)
        granularity = ctypes.c_size_t(0)
        _cuda("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(prop), 0)
        self.nbytes = -(-nbytes // granularity.value) * granularity.value
        if self.nbytes not in self._reserved:
            _cuda("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(self.nbytes), ctypes.c_size_t(0),
                  ctypes.c_uint64(0), ctypes.c_uint64(0))
            self._reserved[self.nbytes] = ptr.value
        self.ptr = self._reserved[self.nbytes]
        handle = ctypes.c_uint64(0)
        _cuda("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(self.nbytes), ctypes.byref(prop), ctypes.c_uint64(0))
        self.handle = handle.value
        _cuda("cuMemMap", ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes), ctypes.c_size_t(0),
              ctypes.c_uint64(self.handle), ctypes.c_uint64(0))
        access = Access(1, device, 3)
        _cuda("cuMemSetAccess", ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes), ctypes.byref(access),
              ctypes.c_size_t(1))

    def tensor(self) -> torch.Tensor:
        class _Interface:  # bf16 has no typestr: int16, viewed as bf16
            __cuda_array_interface__ = dict(shape=self.shape, typestr="<i2", data=(self.ptr, False), version=2,
                                            strides=None)

        return torch.as_tensor(_Interface(), device=_dev()).view(BF16)

    def free(self) -> None:
        torch.cuda.synchronize()
        if self.kind == "malloc":
            _cuda("cuMemFree_v2", ctypes.c_uint64(self.ptr))
        else:
            _cuda("cuMemUnmap", ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
            _cuda("cuMemRelease", ctypes.c_uint64(self.handle))


def _replays_after_reallocation(rank, world_size, kind):
    """Eager calls replay from graphs; then their input's memory is freed to the driver and allocated
    again at the same address (as after ``torch.cuda.empty_cache()``, which ``bench_layers.py`` calls):
    the replay keys match, but the memory is new.

    ``malloc``: a new allocation, whose buffer id differs. A graph whose copies belong to the freed
    one crashed in cuGraphLaunch on two H200s: each round's calls must be captured again.
    ``vmm``: new physical memory mapped at the same address. Whatever the driver's buffer id does
    then, the calls must be correct: replayed while the id is unchanged, captured again when not.
    (The id is printed: ``-s`` shows which.)"""
    import fluxlite
    from fluxlite._cuda_driver import buffer_ids

    gen = torch.Generator(device=_dev()).manual_seed(41 + rank)
    m, K, N = 4096, 8192, 256
    w = (torch.randn(N, K, generator=gen, device=_dev()) / K**0.5).to(BF16)
    out = torch.empty(world_size * m, N, dtype=BF16, device=_dev())
    out_rs = torch.empty(m, N, dtype=BF16, device=_dev())
    a_rs = torch.empty(world_size * m, K, dtype=BF16, device=_dev())
    # The workspace at its final size first: a growth drops every graph, and the counts below with them.
    fluxlite.gemm_rs(torch.randn(world_size * m, K, device=_dev(), dtype=BF16), w, impl="fused")
    fluxlite.ag_gemm(torch.randn(m, K, device=_dev(), dtype=BF16), w, impl="fused", return_gathered=True)
    fluxlite.ag_gemm(torch.randn(m, K, device=_dev(), dtype=BF16), w, impl="fused")
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    captures = 0
    capture = state.capture

    def counted(enqueue):
        nonlocal captures
        captures += 1
        return capture(enqueue)

    state.capture = counted
    memory = _DriverAllocation(m, K, kind)
    seen, reused = {}, 0  # a's address -> the allocation it was in, the last round it was there
    for round_ in range(5):
        a = memory.tensor()
        # AG push's replay keys hold the addresses of a, w, out and our workspace: with a back at an
        # old address, this round's keys are an earlier round's, but a's memory is a new allocation.
        (buffer,) = buffer_ids((a.data_ptr(),))
        stale = a.data_ptr() in seen and seen[a.data_ptr()] != buffer
        replays = seen.get(a.data_ptr()) == buffer
        reused += stale
        seen[a.data_ptr()] = buffer
        push_captures = 0
        for i in range(4):
            a.copy_(torch.randn(m, K, generator=gen, device=_dev(), dtype=BF16))
            a_rs.copy_(torch.randn(world_size * m, K, generator=gen, device=_dev(), dtype=BF16))
            ref, gathered_ref = _ag_reference(a, w, None)
            out.fill_(float("nan"))
            before_push = captures
            fluxlite.ag_gemm(a, w, impl="fused", out=out)
            push_captures += captures - before_push
            assert rel_err(out, ref) < TOL, f"round {round_} call {i}: AG"
            out.fill_(float("nan"))
            _, gathered = fluxlite.ag_gemm(a, w, impl="fused", out=out, return_gathered=True)
            assert rel_err(out, ref) < TOL and torch.equal(gathered, gathered_ref.to(BF16)), f"round {round_} call {i}: AG pull"
            del gathered
            out_rs.fill_(float("nan"))
            fluxlite.gemm_rs(a_rs, w, impl="fused", out=out_rs)
            assert rel_err(out_rs, _rs_reference(a_rs, w, None)) < TOL, f"round {round_} call {i}: RS"
        expected = 0 if replays else 2  # replays, or captures of both parities
        assert push_captures == expected, (f"round {round_} ({kind}, buffer id changed: {stale}): AG push captured "
                                           f"{push_captures} graphs, not {expected}")
        del a
        fluxlite.synchronize()
        memory.free()
        # Usually the driver hands the address straight back; allocations that miss stay allocated
        # (so they are not handed out again) until one lands on an old address, or 8 tries.
        misses = []
        memory = _DriverAllocation(m, K, kind)
        while memory.ptr not in seen and len(misses) < 8:
            misses.append(memory)
            memory = _DriverAllocation(m, K, kind)
        for miss in misses:
            miss.free()
    memory.free()
    if kind == "malloc":
        assert reused >= 2, f"a new allocation came back at an old address in {reused} rounds of 4: too few to check"
    else:
        assert len(seen) == 1, f"vmm: memory mapped at a reserved address moved: {sorted(seen)}"
        print(f"rank {rank} vmm: the buffer id changed in {reused} of 4 remaps", flush=True)


@pytest.mark.parametrize("kind", ["malloc", "vmm"])
def test_eager_replays_stay_correct_when_their_memory_is_reallocated(kind):
    run_gpu_ranks(_replays_after_reallocation, 2, kind)


def _peer_stops_during_replays(rank, world_size, op):
    """Rank 1 stops after six calls that rank 0 replays from graphs; rank 0's seventh call, a
    replay, times out in its kernel, and the record the graph copied back must make rank 0's next
    call raise that timeout (without blocking), naming rank, peer and call."""
    import fluxlite

    gen = torch.Generator(device=_dev()).manual_seed(5 + rank)
    a = torch.randn(512 if op == "rs" else 256, 512, generator=gen, device=_dev()).to(BF16)
    w = (torch.randn(384, 512, generator=gen, device=_dev()) / 512**0.5).to(BF16)
    call = {"ag": lambda: fluxlite.ag_gemm(a, w, impl="fused", timeout=2.0),
            "ag_pull": lambda: fluxlite.ag_gemm(a, w, impl="fused", timeout=2.0, return_gathered=True),
            "rs": lambda: fluxlite.gemm_rs(a, w, impl="fused", timeout=2.0)}[op]
    for _ in range(6):
        call()
    fluxlite.synchronize()
    dist.barrier()
    if rank == 0:
        (plan,) = fluxlite.fused.state_of(fluxlite.get_workspace()).plans.values()
        assert _replays(plan) >= 2, "both parities' calls should replay by now"
        call()  # replayed; no peer
        torch.cuda.current_stream().synchronize()  # the kernel gave up after 2 s
        with pytest.raises(fluxlite.FluxliteTimeoutError) as info:
            call()
        assert (info.value.rank, info.value.peer, info.value.epoch) == (0, 1, 7), str(info.value)
    dist.barrier()


@pytest.mark.parametrize("op", ["ag", "ag_pull", "rs"])
def test_a_replayed_calls_timeout_is_raised_by_the_next_call(op):
    run_gpu_ranks(_peer_stops_during_replays, 2, op, limit_s=90)


def _skipped_call(rank, world_size, op):
    import fluxlite

    fluxlite.get_workspace().reserve(40 << 20)  # collective: both ranks grow it to what rank 0's call needs
    dist.barrier()
    if rank == 0:
        # Each path's own: above the small-call bounds (the copy engine's AG-GEMM, GEMM-RS's overlapped
        # protocol), K off a multiple of 64 for the matmul consumers' bounded waits, or small (AG rows
        # pushed by the SMs, GEMM-RS's one shot).
        from fluxlite.ops import AG, RS

        small = op.endswith("small")
        K = 520 if op.endswith("matmul") else 512
        N = 384 if op.startswith("ag") else 1024
        M = 256 if small else 4096 if op.startswith("ag") else 16384
        path = AG.small_call(2, M, K, N, 2) if op.startswith("ag") else RS.one_shot(2, M, N, 2)
        assert path == small, (op, M, K, N)
        a = torch.randn(M, K, device=_dev()).to(BF16)
        w = torch.randn(N, K, device=_dev()).to(BF16)
        op = op.split("_")[0]
        start = time.monotonic()
        with pytest.raises(fluxlite.FluxliteTimeoutError) as info:
            if op == "ag":
                fluxlite.ag_gemm(a, w, impl="fused", timeout=2.0)
            else:
                fluxlite.gemm_rs(a, w, impl="fused", timeout=2.0)
            fluxlite.synchronize()
        elapsed = time.monotonic() - start
        assert elapsed < 30, f"timeout took {elapsed:.1f} s"
        err = info.value
        assert isinstance(err, TimeoutError)
        assert (err.rank, err.peer, err.epoch) == (0, 1, 1), str(err)
        assert err.chunk == (1 if op == "ag" else 0), str(err)
        with pytest.raises(fluxlite.FluxliteError, match="poisoned"):
            fluxlite.ag_gemm(a, w, impl="fused")
    dist.barrier()


@pytest.mark.parametrize("op", ["ag", "rs", "ag_matmul", "rs_matmul", "ag_small", "rs_small"])
def test_missing_peer_raises_timeout_not_hang(op):
    run_gpu_ranks(_skipped_call, 2, op, limit_s=90)


def _workspace(rank, world_size):
    import fluxlite
    from fluxlite._cuda_driver import mem_op_batch, stream_batch_mem_op

    ws = fluxlite.get_workspace()
    peer = 1 - rank
    payload = torch.randn(4096, generator=torch.Generator(device=_dev()).manual_seed(rank), device=_dev())
    ws.data(peer, 1, (4096,), torch.float32).copy_(payload)  # a store into the peer's memory
    stream = torch.cuda.current_stream()
    stream_batch_mem_op(stream, mem_op_batch([(False, ws.flags(peer).data_ptr() + 4 * 3, 41 + rank)]))
    deadline = time.monotonic() + 20
    while ws.flags(rank)[3].item() != 41 + peer:
        assert time.monotonic() < deadline, "peer's flag never arrived"
    expected = torch.randn(4096, generator=torch.Generator(device=_dev()).manual_seed(peer), device=_dev())
    assert torch.equal(ws.data(rank, 1, (4096,), torch.float32), expected)
    before = ws.capacity
    ws.reserve(before + 1)  # collective growth
    assert ws.capacity > before
    assert ws.flags(rank).abs().sum().item() == 0  # fresh flags
    dist.barrier()


def test_cuda_workspace_peer_views_and_flags():
    run_gpu_ranks(_workspace, 2)


def _unfused(rank, world_size, impl):
    import fluxlite

    gen = torch.Generator(device=_dev()).manual_seed(rank)
    a = torch.randn(300, 512, generator=gen, device=_dev()).to(BF16)
    w = torch.randn(256, 512, generator=gen, device=_dev()).to(BF16)
    b = torch.randn(256, device=_dev()).to(BF16)
    dist.broadcast(b, 0)
    out, gathered = fluxlite.ag_gemm(a, w, b, impl=impl, return_gathered=True)
    ref, ref_g = _ag_reference(a, w, b)
    assert rel_err(out, ref) < TOL and torch.equal(gathered, ref_g), impl
    a2 = torch.randn(600, 512, generator=gen, device=_dev()).to(BF16)
    assert rel_err(fluxlite.gemm_rs(a2, w, b, impl=impl), _rs_reference(a2, w, b)) < TOL, impl


@pytest.mark.parametrize("impl", ["sequential", "decomposed"])
def test_unfused_impls_on_gpus(impl):
    """The two implementations without a workspace; ``decomposed`` moves CUDA rows point to point
    (through host memory where gloo serves CUDA tensors, FLUXLITE_GPU_SHARE=1)."""
    run_gpu_ranks(_unfused, 2, impl)


def test_plain_kernel_matches_cublas():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from fluxlite.kernels.ag_gemm import gemm

    gen = torch.Generator(device="cuda").manual_seed(0)
    for M, K, N in [(4096, 4096, 4096), (1000, 5120, 1376), (77, 264, 200)]:
        a = torch.randn(M, K, generator=gen, device="cuda").to(BF16)
        w = torch.randn(N, K, generator=gen, device="cuda").to(BF16)
        b = torch.randn(N, generator=gen, device="cuda").to(BF16)
        ref = a.float() @ w.float().t() + b.float()
        for weight in (w, w.t().contiguous().t()):  # nn.Linear layout, and a transposed [K, N] (read in place)
            out = torch.full((M, N), float("nan"), dtype=BF16, device="cuda")
            gemm(a, weight, b, out=out)
            assert rel_err(out, ref) < TOL
