"""Host time of torch.cuda.CUDAGraph.replay() for graphs of 1 and 10 fused calls, 10 cuBLAS GEMMs and
10 sequential calls (NCCL captured), each launched while the device sleeps; and the same graphs'
node counts.   torchrun --standalone --nproc-per-node 2 graph_host.py"""
import os, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
import torch.distributed as dist
import fluxlite

tp = fluxlite.init()
W, rank = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
SHAPES = [("rs", 8192, 14336, 8192), ("ag", 4556, 2048, 1536), ("ag", 992, 2048, 2816), ("rs", 1634, 4096, 4096)]


def calls(op, M, K, N, impl):
    bf = torch.bfloat16
    if op == "ag":
        a, w = torch.randn(M // W, K, device=dev, dtype=bf), torch.randn(N // W, K, device=dev, dtype=bf)
        return (lambda: fluxlite.ag_gemm(a, w, impl=impl)), (lambda: torch.matmul(a, w.t()))
    a, w = torch.randn(M, K // W, device=dev, dtype=bf), torch.randn(N, K // W, device=dev, dtype=bf)
    return (lambda: fluxlite.gemm_rs(a, w, impl=impl)), (lambda: torch.matmul(a, w.t()))


def graph_of(fn, n):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    torch.cuda.synchronize()
    return g


def host_us(fn, reps=40):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        torch.cuda._sleep(20_000_000)
        t = time.perf_counter(); fn(); out.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out), min(out)


for op, M, K, N in SHAPES:
    fused, mm = calls(op, M, K, N, "fused")
    seq, _ = calls(op, M, K, N, "sequential")
    graphs = {"fused x1": graph_of(fused, 1), "fused x10": graph_of(fused, 10), "cublas x10": graph_of(mm, 10),
              "sequential x10": graph_of(seq, 10)}
    res = {}
    for name, g in graphs.items():
        g.replay(); torch.cuda.synchronize()
        res[name] = host_us(g.replay)
    res["fused eager"] = host_us(fused)
    fluxlite.synchronize()
    if rank == 0:
        print(f"{op} {M}x{K}->{N}: " + ", ".join(f"{k} {v[0]:.1f} (min {v[1]:.1f})" for k, v in res.items()), flush=True)
    del graphs
    torch.cuda.synchronize()
fluxlite.release_workspaces()
dist.destroy_process_group()
