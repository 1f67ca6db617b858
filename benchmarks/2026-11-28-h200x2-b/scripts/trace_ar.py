"""Kineto traces, both ranks, per shape (SH=MxKxN,...): 10 queued torch.matmul of the whole shape
(the reference GEMM), then 10 queued fused gemm_ar calls. -> $R/tr_<TAG>_<shape>.<rank>.json.gz"""
import os, sys, gzip, shutil
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity
import fluxlite
SH = [tuple(int(v) for v in s.split("x")) for s in os.environ["SH"].split(",")]
tp = fluxlite.init(); rank = tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
tag = os.environ.get("TAG", "base")
for M, K, N in SH:
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    wt = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    f = lambda: fluxlite.gemm_ar(a, wt, impl="fused")
    g = lambda: torch.matmul(a, wt.t())
    for _ in range(5):
        f(); g()
    torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(50_000_000)
        for _ in range(10):
            g()
        torch.cuda._sleep(50_000_000)
        for _ in range(10):
            f()
        torch.cuda.synchronize()
    p = os.path.join(os.environ["R"], f"tr_{tag}_{M}x{K}x{N}.{rank}.json")
    prof.export_chrome_trace(p)
    with open(p, "rb") as src, gzip.open(p + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(p)
fluxlite.release_workspaces(); dist.destroy_process_group()
