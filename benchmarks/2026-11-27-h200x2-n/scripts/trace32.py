"""Kineto chrome traces of 10 queued fused gemm_ar calls per shape (SH=MxKxN,...), both ranks, under
SPLIT_WEIGHTS (as prof_split.py)."""
import os, sys
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity
import fluxlite
sch = sys.modules['fluxlite.schedule']
grs = sys.modules['fluxlite.ops.gemm_rs']
w = [int(x) for x in os.environ.get("SPLIT_WEIGHTS", "").split(",") if x]
if w:
    grs.MATMUL_SPLITS = len(w)
    orig = sch.split_span
    cum = [0]
    for x in w:
        cum.append(cum[-1] + x)
    def span(split, blocks, splits):
        if splits != len(w) or blocks < cum[-1]:
            return orig(split, blocks, splits)
        return range(cum[split] * blocks // cum[-1], cum[split + 1] * blocks // cum[-1])
    sch.split_span = span
import fluxlite
if os.environ.get("PUSH_SHARE"):
    sys.modules["fluxlite.kernels.gather_end"].PUSHER_SHARE = int(os.environ["PUSH_SHARE"])
if os.environ.get("GBLOCK"):
    sys.modules["fluxlite.kernels.gather_end"].BLOCK = int(os.environ["GBLOCK"])
if os.environ.get("PPS"):
    sys.modules["fluxlite.kernels.gemm_ar"].PROGRAMS_PER_SM = int(os.environ["PPS"])

SH = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("SH", "8192x4096x8192").split(",")]
tp = fluxlite.init(); W = tp.world_size; rank = tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
tag = os.environ.get("TAG", "base")
for M, K, N in SH:
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    wt = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    f = lambda: fluxlite.gemm_ar(a, wt, impl="fused")
    for _ in range(5):
        f()
    torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(100_000_000)
        for _ in range(10):
            f()
        torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(os.environ["R"], f"tr_{tag}_{M}x{K}x{N}.{rank}.json"))
fluxlite.release_workspaces(); dist.destroy_process_group()
