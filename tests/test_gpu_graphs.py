"""CUDA-graph capture of the fused ops and layers (docs/cuda_graphs.md), on 2 GPU ranks.

Every replay is checked against a float32 reference on fresh data: the ranks make the same global
operands from one seed, each copies its part into the graph's static inputs, and the output is
poisoned with NaN before the replay, so a row the replay did not write, or wrote from stale data,
fails. The ranks are never synchronised between replays: the protocol alone must keep them apart.
``FLUXLITE_GRAPH_REPLAYS`` sets the replays per graph (default 1000).
"""

from __future__ import annotations

import os
import random
import time

import pytest
import torch
import torch.distributed as dist

from .dist_utils import count_runs
from .gpu_utils import dev, rel_err, run_gpu_ranks, shared_gpus

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
REPLAYS = int(os.environ.get("FLUXLITE_GRAPH_REPLAYS", "1000"))
TOL = 2e-2  # bf16 output of an fp32-accumulated product, against float32


class _Case:
    """One fused call with static inputs: ``load(step)`` writes step's data into them (the same
    global operands on every rank), ``run()`` makes the call, ``reference()`` is float32."""

    def __init__(self, op: str, rows: int, K: int, N: int, **options) -> None:
        W, r = dist.get_world_size(), dist.get_rank()
        self.op, self.options, self.W, self.r = op, options, W, r
        self.rows, self.K, self.N = rows, K, N
        self.row_scaled = options.pop("row_scale", False)
        total = W * rows if op == "ag" else rows
        cols = K if op == "ag" else W * K
        self.a_full = torch.empty(total, cols, device=dev(), dtype=BF16)
        self.w_full = torch.empty(N, cols, device=dev(), dtype=BF16)
        self.s_full = torch.empty(total, device=dev())
        local_rows = slice(r * rows, (r + 1) * rows) if op == "ag" else slice(None)
        local_cols = slice(None) if op == "ag" else slice(r * K, (r + 1) * K)
        self.a = self.a_full[local_rows, local_cols].contiguous()
        self.w = self.w_full[:, local_cols].contiguous()
        self.s = self.s_full[local_rows].contiguous()
        self.local_rows, self.local_cols = local_rows, local_cols

    def load(self, step: int) -> None:
        gen = torch.Generator(device=dev()).manual_seed(1000 + step)
        self.a_full.copy_(torch.randn(self.a_full.shape, generator=gen, device=dev()))
        self.w_full.copy_(torch.randn(self.w_full.shape, generator=gen, device=dev()) / self.w_full.shape[1] ** 0.5)
        self.s_full.copy_(torch.rand(self.s_full.shape, generator=gen, device=dev()) + 0.5)
        self.a.copy_(self.a_full[self.local_rows, self.local_cols])
        self.w.copy_(self.w_full[:, self.local_cols])
        self.s.copy_(self.s_full[self.local_rows])

    def run(self, timeout: float | None = None, impl: str = "fused"):
        import fluxlite

        kw = dict(impl=impl, timeout=timeout)
        if self.op == "rs":
            return fluxlite.gemm_rs(self.a, self.w, **kw, **self.options)
        if self.row_scaled:
            kw["row_scale"] = self.s
        return fluxlite.ag_gemm(self.a, self.w, **kw, **self.options)

    def check(self, got, what: str) -> None:
        out = got[0] if isinstance(got, tuple) else got
        full = self.a_full.float() @ self.w_full.float().t()
        if self.op == "rs":
            mc = self.rows // self.W
            ref = full[self.r * mc : (self.r + 1) * mc]
        else:
            if self.row_scaled:
                full = full * self.s_full[:, None]
            ref = torch.nn.functional.gelu(full) if self.options.get("activation") == "gelu" else full
            if isinstance(got, tuple):
                assert torch.equal(got[1], self.a_full), f"{what}: gathered rows differ"
        err = rel_err(out, ref)
        assert err < TOL, f"{what}: relative error {err:.2e}"


def _cases():
    return [_Case("ag", 1000, 512, 768), _Case("ag", 1000, 512, 768, return_gathered=True),
            _Case("ag", 512, 256, 384, activation="gelu", row_scale=True), _Case("rs", 2000, 512, 640),
            _Case("ag", 1, 128, 256)]


def _capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def _poison(out) -> None:
    (out[0] if isinstance(out, tuple) else out).fill_(float("nan"))


def _replays(case: _Case, graph, out, seeds, what: str) -> None:
    """Replay ``graph`` once per seed of ``seeds`` on that step's data, checking each replay."""
    for step in seeds:
        case.load(step)
        _poison(out)
        graph.replay()
        case.check(out, f"{what}: replay on data {step}")


def _replay_every_case(rank, world_size):
    import fluxlite

    cases = _cases()
    for i, case in enumerate(cases):  # the warm-up: one eager call per shape builds plans and workspace
        case.load(i)
        case.check(case.run(), f"eager {case.op} {case.options}")
    graphs = [_capture(case.run) for case in cases]
    for step in range(REPLAYS):
        for case, (graph, out) in zip(cases, graphs):
            case.load(step)
            _poison(out)
            graph.replay()
            case.check(out, f"replay {step} of {case.op} rows={case.rows} {case.options}")
    fluxlite.synchronize()


def test_fused_calls_replay_from_a_graph_with_fresh_data():
    run_gpu_ranks(_replay_every_case, 2, limit_s=600)


def _interleaved(rank, world_size):
    """Graph A (one call), graph B (two calls) and eager calls in a seeded random order, the same on
    both ranks; the null calls the device ran must be those a host model of parities predicts, and its
count of calls (which names a call in an error record) every call it ran, replays included."""
    import fluxlite

    ag, rs = _Case("ag", 700, 256, 384), _Case("rs", 1400, 256, 320)
    for i, case in enumerate((ag, rs)):
        case.load(i)
        case.check(case.run(), "eager warm-up")
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    parity_next = (state.epoch + 1) % 2  # the device's next parity: eager calls alternate
    calls = state.epoch  # the device's count of calls: the eager ones so far (captures run nothing)
    a_parity = [(state.epoch + 1) % 2]
    graph_a, out_a = _capture(ag.run)
    b_parities = [(state.epoch + 1) % 2, (state.epoch + 2) % 2]
    graph_b, out_b = _capture(lambda: (ag.run(), rs.run()))
    predicted = 0

    def device_runs(parities):
        nonlocal parity_next, predicted, calls
        for p in parities:
            predicted += p != parity_next
            parity_next = 1 - p
            calls += 1

    rng = random.Random(5)
    history = []
    assert state.sequence.tolist() == [parity_next, 0, calls]
    for step in range(300):
        kind = rng.choice(["A", "B", "eager ag", "eager rs"])
        ag.load(step)
        rs.load(step + 7)
        if kind == "A":
            _poison(out_a)
            graph_a.replay()
            device_runs(a_parity)
            ag.check(out_a, f"step {step}: graph A")
        elif kind == "B":
            _poison(out_b[0])
            _poison(out_b[1])
            graph_b.replay()
            device_runs(b_parities)
            ag.check(out_b[0], f"step {step}: graph B's ag")
            rs.check(out_b[1], f"step {step}: graph B's rs")
        else:
            case = ag if kind == "eager ag" else rs
            device_runs([(state.epoch + 1) % 2])
            case.check(case.run(), f"step {step}: {kind}")
        history.append(kind)
        ran = state.sequence.tolist()
        assert ran == [parity_next, predicted, calls], f"after {history}: device [next parity, null calls, calls] {ran}"
    fluxlite.synchronize()
    assert predicted > 20, "the sequence never made two consecutive calls share a parity"


def test_replays_and_eager_calls_interleave_on_one_workspace():
    run_gpu_ranks(_interleaved, 2, limit_s=300)


def _bad_uses(rank, world_size):
    import fluxlite

    case = _Case("ag", 256, 128, 256)
    case.load(0)
    scratch = torch.zeros(4, device=dev())

    def capture_raises(fn, match):
        with pytest.raises(fluxlite.FluxliteError, match=match):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                scratch.add_(1)  # something to capture, so the capture itself is valid
                fn()

    capture_raises(case.run, "before its workspace exists")  # nothing ran eagerly: no workspace
    case.check(case.run(), "eager after the refused capture")
    other = _Case("ag", 320, 128, 256)
    other.load(1)
    capture_raises(other.run, "never ran eagerly")
    graph, out = _capture(case.run)
    _replays(case, graph, out, [0], "after the refused captures")
    big = _Case("ag", 64 * 1024, 128, 256)  # needs a larger workspace than the graph's
    big.load(2)
    with pytest.raises(fluxlite.FluxliteError, match="grow"):
        big.run()
    _replays(case, graph, out, [3], "after the refused growth")
    fluxlite.synchronize()


def test_bad_uses_of_capture_raise_clear_errors():
    run_gpu_ranks(_bad_uses, 2, limit_s=240)


def _missing_peer_in_replay(rank, world_size):
    import fluxlite

    timeout = 3.0
    case = _Case("ag", 512, 256, 384)
    case.load(0)
    case.check(case.run(timeout=timeout), "eager")
    graph, out = _capture(lambda: case.run(timeout=timeout))
    _replays(case, graph, out, range(5), "before rank 1 stops")
    if rank == 0:  # rank 1 stops replaying: the sixth replay's waits run out
        graph.replay()
        start = time.monotonic()
        with pytest.raises(fluxlite.FluxliteTimeoutError) as info:
            fluxlite.synchronize()
        assert time.monotonic() - start < timeout + 10
        assert (info.value.rank, info.value.peer) == (0, 1), str(info.value)
        start = time.monotonic()
        graph.replay()  # every wait sees the record and returns at once
        torch.cuda.synchronize()
        assert time.monotonic() - start < 2.0
    dist.barrier()
    fluxlite.release_workspaces()  # recovery: fresh buffers, then capture again
    case.load(10)
    case.check(case.run(timeout=timeout), "eager after recovery")
    graph, out = _capture(lambda: case.run(timeout=timeout))
    _replays(case, graph, out, range(20, 25), "after recovery")
    fluxlite.synchronize()


def test_a_peer_that_stops_replaying_gives_a_timeout_not_a_hang():
    run_gpu_ranks(_missing_peer_in_replay, 2, limit_s=240)


def _reduce_overhead(rank, world_size):
    """torch.compile(mode="reduce-overhead"): cudagraph trees record the custom ops after their eager
    warm-up runs and replay them; every step checked against float32 on fresh data."""
    import fluxlite
    import fluxlite.library as fl

    ag, rs = _Case("ag", 512, 256, 384), _Case("rs", 1024, 256, 320)

    def step(a_ag, w_ag, a_rs, w_rs):
        return fl.ag_gemm(a_ag, w_ag, impl="fused", activation="gelu"), fl.gemm_rs(a_rs, w_rs, impl="fused")

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    ag.options["activation"] = "gelu"
    ag.load(0)
    rs.load(0)
    # The warm-up fluxlite asks for, outside the compiled function: cudagraph trees run their own
    # warm-up in the graph's memory pool, where a new workspace would be an untracked live tensor.
    step(ag.a, ag.w, rs.a, rs.w)
    for i in range(20):
        ag.load(i)
        rs.load(100 + i)
        out_ag, out_rs = compiled(ag.a, ag.w, rs.a, rs.w)
        ag.check(out_ag.clone(), f"compiled step {i}: ag")
        rs.check(out_rs.clone(), f"compiled step {i}: rs")
    fluxlite.synchronize()
    assert fluxlite.fused.state_of(fluxlite.get_workspace()).captured, "cudagraph trees never captured the ops"


def test_reduce_overhead_compile_replays_the_fused_ops():
    run_gpu_ranks(_reduce_overhead, 2, limit_s=300)


def _layer_pair(rank, world_size, column_weight_grad):
    """Column -> GELU -> Row under sequence parallelism, forward and backward in one graph. With
    ``column_weight_grad`` the Column's backward gathers its input again for wgrad (AG-GEMM's
    copy-engine transport, the weight grad's GEMMs between its waits, in the graph); without it the
    Column's weight is frozen and the backward is the fused ops alone."""
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    W, s, b, K = world_size, 256, 2, 256
    torch.manual_seed(0)  # the same parameters on every rank (each keeps its shard)
    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=BF16)
    col = ColumnParallelLinear(K, 4 * K, config=cfg, init_method=torch.nn.init.xavier_normal_, bias=True,
                               gather_output=False, skip_bias_add=False, overlap="fused")
    col.weight.requires_grad_(column_weight_grad)
    row = RowParallelLinear(4 * K, K, config=cfg, init_method=torch.nn.init.xavier_normal_, bias=True,
                            input_is_parallel=True, skip_bias_add=False, overlap="fused")
    params = [p for p in (*col.parameters(), *row.parameters()) if p.requires_grad]
    x = torch.empty(s // W, b, K, device=dev(), dtype=BF16, requires_grad=True)

    def step():
        h, _ = col(x)
        y, _ = row(torch.nn.functional.gelu(h))
        loss = (y.float() ** 2).mean()
        loss.backward()
        return loss

    def load(i):
        gen = torch.Generator(device=dev()).manual_seed(100 * i + rank)
        with torch.no_grad():
            x.copy_(torch.randn(x.shape, generator=gen, device=dev()))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graph asks
        for i in range(2):
            load(i)
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in (*params, x):
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = step()
    static_grads = [t.grad for t in (*params, x)]  # the replays write into these, whatever .grad holds later
    for i in range(100):
        load(i)
        graph.replay()
        got = [loss.detach().clone()] + [g.clone() for g in static_grads]
        for t in (*params, x):
            t.grad = None
        want = [step().detach()] + [t.grad for t in (*params, x)]
        for k, (g, e) in enumerate(zip(got, want)):
            err = rel_err(g, e)
            assert err < 1e-2, f"replay {i}: item {k} (loss, then grads) differs from eager by {err:.2e}"
    import fluxlite

    fluxlite.synchronize()


@pytest.mark.parametrize("column_weight_grad", [True, False], ids=["regather", "frozen_column_weight"])
def test_a_layer_pair_forward_and_backward_replays_from_a_graph(column_weight_grad):
    if shared_gpus() and column_weight_grad:
        pytest.skip("2 ranks on one GPU: the captured re-gather is checked on two GPUs only")
    run_gpu_ranks(_layer_pair, 2, column_weight_grad, limit_s=300)


def _auto_captured(rank, world_size):
    """Undeclared, with modes whose choices differ (throughput fused, latency and both sequential): an
    eager auto call runs sequential, a captured one fused once an eager call in throughput mode made
    fused warm, and eager calls after the capture run sequential again: neither repeats the other's
    decisions."""
    import fluxlite
    from fluxlite import dispatch, ops

    case = _Case("ag", 256, 512, 768)
    key = dispatch.Key.of("ag_gemm", fluxlite.group.resolve_group(None), case.a, case.w, world_size * case.rows)
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    dispatch._MEMORY[key] = dispatch.Choices.of(fused, seq, seq)
    ran = count_runs(ops.AG)

    def auto():
        return case.run(impl="auto")

    for step in range(3):
        case.load(step)
        case.check(auto(), f"eager auto {step}")
    assert ran == {"sequential": 3, "fused": 0}, ran
    with dispatch.assume_mode("throughput"):
        case.load(3)
        case.check(auto(), "eager auto, throughput declared")
    assert ran == {"sequential": 3, "fused": 1}, ran
    graph, out = _capture(auto)
    assert ran == {"sequential": 3, "fused": 2}, f"the capture did not take the throughput choice: {ran}"
    _replays(case, graph, out, range(4, 12), "captured auto")
    for step in range(12, 15):
        case.load(step)
        case.check(auto(), f"eager auto after the capture {step}")
    assert ran == {"sequential": 6, "fused": 2}, ran
    fluxlite.synchronize()


def test_a_captured_auto_call_and_eager_ones_each_run_their_modes_choice():
    run_gpu_ranks(_auto_captured, 2, limit_s=180)
