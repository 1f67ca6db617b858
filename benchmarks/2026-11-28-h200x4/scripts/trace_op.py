"""Kineto traces, ranks 0 and 1, per shape (SH=MxKxN,...; OP=gemm_rs|gemm_ar|ag_gemm): 10 queued
torch.matmul of the shape, then 10 queued fused calls; queued timings (CUDA events, 20 calls, median of 5)
of matmul and fused printed by rank 0. -> $R/tr_<TAG>_<op>_<shape>.<rank>.json.gz"""
import os, sys, gzip, shutil
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity
import fluxlite
SH = [tuple(int(v) for v in s.split("x")) for s in os.environ["SH"].split(",")]
OP = os.environ.get("OP", "gemm_rs")
tp = fluxlite.init(); rank, W = tp.rank, tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
tag = os.environ.get("TAG", "base")
for M, K, N in SH:
    rows = M // W if OP == "ag_gemm" else M
    a = torch.randn(rows, K, device=dev, dtype=torch.bfloat16)
    wt = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
    f = lambda: getattr(fluxlite, OP)(a, wt, impl="fused")
    full = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    g = lambda: torch.matmul(full, wt.t())
    for _ in range(5):
        f(); g()
    def timed(fn, n=20):
        ts = []
        for _ in range(5):
            torch.cuda.synchronize(); dist.barrier()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                fn()
            e1.record(); e1.synchronize(); ts.append(e0.elapsed_time(e1) / n)
        t = torch.tensor([sorted(ts)[2]], device=dev); dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()
    tg, tf = timed(g), timed(f)
    if rank == 0:
        print(f"{tag} W={W} {OP} {M}x{K}x{N}: matmul {tg*1e3:.0f} us, fused {tf*1e3:.0f} us, {tf/tg:.3f}x", flush=True)
    torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
    if os.environ.get("NOTRACE"):
        continue
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(50_000_000)
        for _ in range(10):
            g()
        torch.cuda._sleep(50_000_000)
        for _ in range(10):
            f()
        torch.cuda.synchronize()
    dist.barrier()
    if rank > 1:
        continue
    p = os.path.join(os.environ["R"], f"tr_{tag}_{OP}_{M}x{K}x{N}.{rank}.json")
    prof.export_chrome_trace(p)
    with open(p, "rb") as src, gzip.open(p + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(p)
fluxlite.release_workspaces(); dist.destroy_process_group()
