"""AG/RS fused calls with the schedule's split cap forced to 4, 2, 1: per call, the x10 graph's
cuGraphLaunch host time (device asleep), replayed device time, eager throughput; result vs sequential.
  torchrun --standalone --nproc-per-node 2 splits_graph.py"""
import os, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite import _cuda_driver as drv
from fluxlite import schedule as sch

tp = fluxlite.init()
W, rank = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
SHAPES = [("ag", 4096, 8192, 5120), ("ag", 4556, 2048, 1536), ("ag", 992, 2048, 2816), ("rs", 4096, 4096, 8192),
          ("ag", 2048, 4096, 4096), ("ag", 4096, 4096, 3584), ("rs", 1634, 4096, 4096), ("rs", 4096, 14336, 4096)]
bf = torch.bfloat16


def make(op, M, K, N):
    g = torch.Generator(device=dev).manual_seed(rank * 7 + M)
    if op == "ag":
        a, w = torch.randn(M // W, K, device=dev, dtype=bf, generator=g), torch.randn(N // W, K, device=dev, dtype=bf, generator=g) / K ** .5
        return (lambda impl: fluxlite.ag_gemm(a, w, impl=impl))
    a, w = torch.randn(M, K // W, device=dev, dtype=bf, generator=g), torch.randn(N, K // W, device=dev, dtype=bf, generator=g) / K ** .5
    return (lambda impl: fluxlite.gemm_rs(a, w, impl=impl))


def host_launch(ex, reps=50):
    s = torch.cuda.current_stream().cuda_stream
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); drv.graph_launch(ex, s); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def dev_ms(fn, n):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    torch.cuda._sleep(50_000_000)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n): fn()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


for op, M, K, N in SHAPES:
    call = make(op, M, K, N)
    ref = call("sequential").float(); torch.cuda.synchronize()
    rows = {}
    for rnd in range(2):
        for cap in (4, 2, 1):
            sch.DEFAULT_MAX_SPLITS = cap; sch.build.cache_clear()
            torch.cuda.synchronize(); dist.barrier()
            print(f"rank {rank} {op} {M}x{K}->{N} cap {cap} round {rnd} {time.strftime('%X')}", flush=True)
            fluxlite.release_workspaces()
            dist.barrier()
            out = call("fused"); torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            g = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(g):
                for _ in range(10):
                    call("fused")
            g.instantiate(); g.replay(); torch.cuda.synchronize()
            h = host_launch(g.raw_cuda_graph_exec()) / 10
            d_graph = dev_ms(g.replay, 10) / 10
            d_eager = dev_ms(lambda: call("fused"), 60)
            rows.setdefault(cap, []).append((h, d_graph * 1e3, d_eager * 1e3, err))
            del g
    seq = dev_ms(lambda: call("sequential"), 60) * 1e3
    if rank == 0:
        print(f"{op} {M}x{K}->{N}: seq {seq:.1f} us/call", flush=True)
        for cap, r in rows.items():
            print("  cap %d: host/call %s  graph us/call %s  eager us/call %s  err %.2e" % (
                cap, " ".join(f"{x[0]:.1f}" for x in r), " ".join(f"{x[1]:.1f}" for x in r),
                " ".join(f"{x[2]:.1f}" for x in r), max(x[3] for x in r)), flush=True)
fluxlite.release_workspaces()
dist.destroy_process_group()
