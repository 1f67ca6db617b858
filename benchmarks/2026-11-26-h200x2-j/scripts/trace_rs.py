"""Kineto traces of back-to-back fused GEMM-RS (matmul consumer), the limit and cuBLAS (torchrun, 2 GPUs).
Environment: SRC, the tree whose fluxlite to run (default: the working directory); CALLS, calls per
callable (default 8)."""
import os, sys
sys.path.insert(0, os.environ.get("SRC", os.getcwd()))
import torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.limit import limit_case
from fluxlite.dispatch import Choice
from fluxlite.ops.gemm_rs import RS
from torch.profiler import profile, ProfilerActivity

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
OUT = os.environ.get("OUT", ".")
for spec in sys.argv[1].split():
    M, K, N = (int(v) for v in spec.split(","))
    g = torch.Generator(device="cuda").manual_seed(5 + rank)
    x = dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
             w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
             o=torch.empty(M // W, N, device="cuda", dtype=torch.bfloat16),
             full=torch.empty(M, N, device="cuda", dtype=torch.bfloat16))
    gemm = lambda x: torch.matmul(x["a"], x["w"].t(), out=x["full"])
    def fused(x):
        args = RS.check(x["a"], x["w"], None, group=tp.group, impl="fused", timeout=15.0, out=x["o"], scale=None)
        return RS.run(Choice("fused", None), args)
    limit, _, transfer = limit_case(tp, "gemm_rs", M, K, N, torch.bfloat16, dev, gemm, 30.0)
    fns = dict(cublas=gemm, limit=limit, fused=fused)
    for f in fns.values():
        for _ in range(5): f(x)
    torch.cuda.synchronize(); dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for name, f in fns.items():
            dist.barrier(); torch.cuda.synchronize()
            for _ in range(int(os.environ.get("CALLS", 8))): f(x)
            torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(OUT, f"trace_{M}x{K}x{N}_r{rank}.json"))
    transfer.close()
    fluxlite.release_workspaces()
