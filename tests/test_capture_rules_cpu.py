"""The capture rules of docs/cuda_graphs.md on CPU gloo ranks: the one predicate that says "a CUDA
graph is capturing" (``fluxlite.workspace.capturing``) is made to say yes, and each bad use must
raise its ``FluxliteError`` before anything is built or communicated, on every rank alike:

- a fused call before any eager one (no workspace to use);
- a shape or option that never ran eagerly (no plan);
- growth of a workspace that a graph has captured (eager or not).

A call with a warmed shape goes through, and marks the workspace as captured. On GPUs the same rules
are tested under real capture (tests/test_gpu_graphs.py).

Also GEMM-RS's partials in the state's kept scratch buffer, which a pretended capture must not grow,
and, with the driver stood in for, the eager replay's rule and where a call's end is enqueued.
"""

from __future__ import annotations

import contextlib
import importlib

import pytest
import torch

import fluxlite
from fluxlite import workspace

from .dist_utils import run_ranks


@contextlib.contextmanager
def _pretend_capture():
    real = workspace.capturing
    workspace.capturing = lambda device: True
    try:
        yield
    finally:
        workspace.capturing = real


def _rules(rank, W):
    gen = torch.Generator().manual_seed(rank)
    a, w = torch.randn(64, 32, generator=gen), torch.randn(48, 32, generator=gen)
    with _pretend_capture(), pytest.raises(fluxlite.FluxliteError, match="before its workspace exists"):
        fluxlite.ag_gemm(a, w, impl="fused")
    fluxlite.ag_gemm(a, w, impl="fused")  # the warm-up: workspace and plan
    ws = fluxlite.get_workspace()
    state = fluxlite.fused.state_of(ws)
    assert not state.captured
    for bad in (dict(a=a[:40]), dict(a=a, activation="gelu"), dict(a=a, return_gathered=True)):
        args = dict(bad)
        with _pretend_capture(), pytest.raises(fluxlite.FluxliteError, match="never ran eagerly"):
            fluxlite.ag_gemm(args.pop("a"), w, impl="fused", **args)
    with _pretend_capture():
        out = fluxlite.ag_gemm(a, w, impl="fused")  # a warmed shape: no error
    assert out.shape == (W * 64, 48) and state.captured
    capacity = ws.capacity
    big = torch.randn(ws.capacity // (32 * 4) + 1, 32)  # more rows than a data half holds
    with pytest.raises(fluxlite.FluxliteError, match="would replay into the freed buffers"):
        fluxlite.ag_gemm(big, w, impl="fused")  # eager, but a graph holds the buffers
    assert ws.capacity == capacity
    fluxlite.ag_gemm(a, w, impl="fused")  # the refusal poisoned nothing


def test_capture_rules_raise_before_anything_is_built():
    run_ranks(_rules, 2)


def test_an_eager_replay_is_captured_again_when_its_copied_memory_is_a_new_allocation(monkeypatch):
    """``Call._replay``'s rule, with the driver stood in for (GPU: tests/test_gpu_fused.py,
    ``..._after_empty_cache``): the first sighting of a key runs without a graph; the second captures
    one; later calls launch it while the driver's buffer ids of the copied addresses are those of the
    capture, and capture again (then launch the new graph) once one of them differs: the same
    address, now in another allocation (torch.cuda.empty_cache, then a new segment)."""
    from types import SimpleNamespace

    from fluxlite import _cuda_driver as cu
    from fluxlite.fused.call import Bindings, Call
    from fluxlite.fused.state import Replay

    buffers = {0x1000: 7, 0x2000: 9}  # address -> the allocation the driver says holds it
    launched, captured = [], []
    monkeypatch.setattr(cu, "buffer_ids", lambda addresses: tuple(buffers[a] for a in addresses))
    monkeypatch.setattr(cu, "graph_launch", lambda exec_, stream: launched.append((exec_, stream)))

    def capture(enqueue):
        enqueue()
        captured.append(len(captured) + 100)
        return Replay(graph=None, exec=captured[-1])

    enqueued = []
    bindings = Bindings()
    call = SimpleNamespace(capturing=False, op="ag_gemm", stream=5, _bindings=lambda: bindings,
                           state=SimpleNamespace(capture=capture),
                           _enqueue=lambda program, consume, end, consume_aligns: enqueued.append(program))
    replay = lambda: Call._replay(call, ("key",), (0x1000, 0x2000), lambda: "program", None)  # noqa: E731

    assert replay() is False and not captured and not launched  # first sighting: eager
    assert replay() is True and captured == [100] and enqueued == ["program"] and launched == [(100, 5)]
    assert replay() is True and captured == [100] and launched[-1] == (100, 5)  # same allocations: replay
    buffers[0x2000] = 10  # freed to the driver, and a new allocation at the same address
    assert replay() is True and captured == [100, 101] and launched[-1] == (101, 5)
    assert bindings.graphs[("key",)].buffers == (7, 10)
    assert replay() is True and captured == [100, 101] and launched[-1] == (101, 5)
    assert Call._replay(call, None, (), lambda: "program", None) is False  # no key (CPU): never a graph


def _kept_partials(rank, W):
    """GEMM-RS's partials (of calls past its one shot) live in the state's scratch buffer
    (docs/cuda_graphs.md), so that a call recurs at the same addresses whatever else was allocated
    between: the same buffer for a recurring
    call, a larger one for a larger call, the one a user's graph may replay into kept when replaced,
    and under a capture that needs it larger, the capture's own allocation (never cached). Every
    result against float64, outputs poisoned first."""
    from .numerics import check, randn, rs_reference

    importlib.import_module("fluxlite.ops.gemm_rs").ONE_SHOT_MAX_BYTES = 0  # the overlapped protocol's partials
    gen = torch.Generator().manual_seed(5)  # every rank draws every rank's operands
    K, N = 24, 40
    failures: list[str] = []

    def rs(M: int, name: str) -> None:
        a_parts = [randn(gen, M, K, dtype=torch.float32) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=torch.float32) for _ in range(W)]
        out = torch.full((M // W, N), float("nan"))
        fluxlite.gemm_rs(a_parts[rank], w_parts[rank], impl="fused", out=out)
        check(name, out, rs_reference(a_parts, w_parts, None, rank), torch.float32, failures)

    fluxlite.ag_gemm(torch.randn(64, 512), torch.randn(8, 512), impl="fused")  # room for every RS call below
    state = fluxlite.fused.state_of(fluxlite.get_workspace())
    capacity = state.ws.capacity
    rs(8 * W, "first")
    assert state._scratch is not None and state._scratch.numel() == W * 8 * N * 4, "the call's partials are not in it"
    scratch = state.scratch((W, 8, N), torch.float32)
    kept = []
    for i in range(3):
        kept.append(torch.empty(1000 * (i + 1)))  # other work's allocations between the calls
        rs(8 * W, f"again {i}")
        assert state.scratch((W, 8, N), torch.float32) is scratch, "a recurring call's partials moved"
    rs(40 * W, "larger")  # grows the scratch buffer, not the workspace
    assert state._scratch.numel() == W * 40 * N * 4, "the larger call did not grow it"
    grown = state.scratch((W, 40, N), torch.float32)
    assert grown.numel() == W * 40 * N and state.ws.capacity == capacity
    assert state.scratch((W, 8, N), torch.float32).data_ptr() == grown.data_ptr(), "one buffer, views from its start"
    rs(8 * W, "smaller again")
    assert not state._retired_scratch, "no graph holds the old buffer: it goes"
    with _pretend_capture():
        loose = state.scratch((W, 80, N), torch.float32)  # larger than the buffer, under capture
    assert loose.data_ptr() != grown.data_ptr() and state.scratch((W, 40, N), torch.float32) is grown
    state.captured = True  # as after a user's capture of a fused call
    rs(80 * W, "larger after a capture")
    assert [t.data_ptr() for t in state._retired_scratch] == [grown.data_ptr()], "a graph may replay into it"
    from fluxlite.fused.state import MAX_SCRATCH_VIEWS
    for m in range(1, MAX_SCRATCH_VIEWS + 10):  # calls of ever new shapes keep a bounded number of views
        state.scratch((W, m, N), torch.float32)
    assert len(state._scratch_views) <= MAX_SCRATCH_VIEWS
    assert not failures, failures


def test_gemm_rs_partials_are_kept_grown_and_retired():
    run_ranks(_kept_partials, 2)


@pytest.mark.parametrize("shares_gpu", [False, True])
def test_the_calls_end_goes_beside_the_producer_only_where_no_rank_shares_its_gpu(shares_gpu, monkeypatch):
    """``Call._enqueue``'s order, with the driver stood in for: the producer's steps after the
    consumer, its end event, then the end (GEMM-AllReduce's gather end) before the caller's stream
    joins the producer's, so that it copies the peers' earlier splits while the producer's last copies
    travel; where ranks share a GPU the end comes after the join, since a copy between two ranks of
    one GPU may be a copy kernel that the end's spinning programs would leave no SM to run on."""
    from types import SimpleNamespace

    from fluxlite import _cuda_driver as cu
    from fluxlite.fused import call as call_module
    from fluxlite.fused import producer
    from fluxlite.fused.call import Call

    order = []
    main, side = 5, 6
    monkeypatch.setattr(call_module.torch._C, "_cuda_getCurrentRawStream", lambda index: main, raising=False)
    monkeypatch.setattr(cu, "event_record", lambda event, stream: order.append(("record", event, stream)))
    monkeypatch.setattr(cu, "stream_wait_event", lambda stream, event: order.append(("wait", stream, event)))
    monkeypatch.setattr(cu, "memcpy_async", lambda stream, dst, src, n: order.append(("stage", stream)))
    monkeypatch.setattr(producer, "enqueue_on_stream",
                        lambda calls, stream, *a: order.append(("producer", stream, calls)))
    state = SimpleNamespace(producer_handle=side, call_start=SimpleNamespace(cuda_event="start"),
                            call_end=SimpleNamespace(cuda_event="end"))
    call = SimpleNamespace(state=state, ws=SimpleNamespace(device=SimpleNamespace(index=0), shares_gpu=shares_gpu),
                           plan=SimpleNamespace(consumer="triton"), align=lambda: order.append(("align",)))
    program = SimpleNamespace(steps=["a step"], staged=[], on_stream=(["before"], ["after"]))
    Call._enqueue(call, program, lambda: order.append(("consumer",)), lambda: order.append(("end",)))
    join = ("wait", main, "end")
    assert order[:6] == [("align",), ("record", "start", main), ("wait", side, "start"),
                         ("producer", side, ["before"]), ("consumer",), ("producer", side, ["after"])]
    assert order[6] == ("record", "end", side)
    assert order[7:] == ([join, ("end",)] if shares_gpu else [("end",), join])
