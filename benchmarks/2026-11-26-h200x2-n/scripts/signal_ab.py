"""Flag writes to peers as memops (before) or as copies of the SET word (now), one process, interleaved:
host time of a replay of user graphs of 1 and 10 fused calls, device time per replayed call, and eager
calls (which replay fluxlite's own graphs) in alternating blocks.
    torchrun --standalone --nproc-per-node 2 signal_ab.py"""
import os, random, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
import torch.distributed as dist
import fluxlite
from fluxlite.fused.state import FusedState
from fluxlite.process import PROCESS

tp = fluxlite.init()
W, rank = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
ORIG = FusedState.signal_copy


def use(variant):
    torch.cuda.synchronize()
    FusedState.signal_copy = ORIG if variant == "copy" else (lambda self: None)
    for st in PROCESS.fused_states.values():
        for plan in st.plans.values():
            plan.bound.programs.clear()  # a user's capture builds from programs; eager replays keep theirs
    torch.cuda.synchronize()


SHAPES = [("ag", 8192, 8192, 14336), ("rs", 8192, 14336, 8192), ("ag", 4096, 8192, 5120), ("rs", 4096, 4096, 8192),
          ("rs", 1634, 4096, 4096), ("ag", 992, 2048, 2816), ("ag", 4556, 2048, 1536), ("ag", 128, 4096, 2048),
          ("ag", 1554, 4096, 3584), ("rs", 5000, 5120, 2816), ("ag", 6000, 5000, 7000), ("rs", 6000, 7000, 5000),
          ("ag", 16, 8192, 8192)]


def call_of(op, M, K, N):
    bf = torch.bfloat16
    if op == "ag":
        a, w = torch.randn(M // W, K, device=dev, dtype=bf), torch.randn(N // W, K, device=dev, dtype=bf)
        return lambda: fluxlite.ag_gemm(a, w, impl="fused")
    a, w = torch.randn(M, K // W, device=dev, dtype=bf), torch.randn(N, K // W, device=dev, dtype=bf)
    return lambda: fluxlite.gemm_rs(a, w, impl="fused")


def graph_of(fn, n):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fn() for _ in range(n)]
    return g, outs


def host_us(fn):
    torch.cuda.synchronize(); dist.barrier()
    torch.cuda._sleep(20_000_000)
    t = time.perf_counter(); fn(); dt = (time.perf_counter() - t) * 1e6
    torch.cuda.synchronize()
    return dt


def device_ms(fn, reps):
    torch.cuda.synchronize(); dist.barrier()
    torch.cuda._sleep(30_000_000)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


V = ("memop", "copy")
for op, M, K, N in SHAPES:
    fn = call_of(op, M, K, N)
    ref = fn().float()
    graphs = {}
    for v in V:
        use(v)
        for _ in range(3):
            fn()
        graphs[v] = graph_of(fn, 1), graph_of(fn, 10)
    res = {f"{k} {v}": [] for k in ("x1 host", "x10 host", "replay tp") for v in V}
    for rep in range(15):
        for v in (V if rep % 2 else V[::-1]):
            (g1, _), (g10, _) = graphs[v]
            res[f"x1 host {v}"].append(host_us(g1.replay))
            res[f"x10 host {v}"].append(host_us(g10.replay) / 10)
            if rep < 7:
                res[f"replay tp {v}"].append(device_ms(g10.replay, 3) / 10 * 1e3)
    torch.cuda.synchronize()
    err = max((o.float() - ref).abs().max().item() for v in V for (g, outs) in graphs[v] for o in outs)
    med = {k: statistics.median(x) for k, x in res.items()}
    t = torch.tensor([med[k] for k in res], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    med = dict(zip(res, t.tolist()))
    if rank == 0:
        print(f"{op} {M}x{K}->{N}: " + "; ".join(f"{k} {med[k + ' memop']:.1f} -> {med[k + ' copy']:.1f}"
                                               for k in ("x1 host", "x10 host", "replay tp"))
              + f" (host us, device us per call, max over ranks); max |replay - first eager| {err:.3g}", flush=True)
    del graphs
fluxlite.release_workspaces()
dist.destroy_process_group()
