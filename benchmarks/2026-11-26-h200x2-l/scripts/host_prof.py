"""Host cost of a repeated fused call against the same call through auto (2 GPUs, torchrun): per-call
perf_counter in a warm loop and after a sync+barrier (the latency mode's context), and cProfile's top
functions for 300 warm calls of each."""
import cProfile, io, os, pstats, sys, time
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite import dispatch

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
for op, M, K, N in (("rs", 1024, 4096, 8192), ("ag", 5000, 6144, 6144)):
    f = fluxlite.gemm_rs if op == "rs" else fluxlite.ag_gemm
    a = torch.randn(M if op == "rs" else M // W, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K**0.5
    outs = {i: torch.empty(M // W if op == "rs" else M, N, device=dev, dtype=torch.bfloat16) for i in ("fused", "auto", "sequential")}
    with dispatch.tuning():
        f(a, w, impl="auto", out=outs["auto"])
    calls = {"fused": lambda: f(a, w, impl="fused", out=outs["fused"]),
             "auto": lambda: f(a, w, impl="auto", out=outs["auto"]),
             "sequential": lambda: f(a, w, impl="sequential", out=outs["sequential"])}
    with dispatch.assume_mode("latency"):
        for name, c in calls.items():
            for _ in range(20): c()
        torch.cuda.synchronize()
        res = {}
        for name, c in calls.items():
            warm, cold = [], []
            for i in range(200):
                t = time.perf_counter(); c(); warm.append(time.perf_counter() - t)
            torch.cuda.synchronize()
            for i in range(30):
                torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
                t = time.perf_counter(); c(); cold.append(time.perf_counter() - t)
            torch.cuda.synchronize()
            res[name] = (sorted(warm)[100] * 1e6, sorted(cold)[15] * 1e6)
        if rank == 0:
            print(op, M, K, N, "choice", dispatch.describe_modes(dispatch.Key.of(("gemm_rs" if op == "rs" else "ag_gemm"), tp, a, w, M)), 
                  {k: "warm %.1f cold %.1f us" % v for k, v in res.items()})
        for name in ("fused", "auto"):
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(300): calls[name]()
            pr.disable()
            torch.cuda.synchronize()
            if rank == 0:
                s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
                print(f"== {op} {name}\n" + "\n".join(l for l in s.getvalue().splitlines() if l.strip())[:4000])
    dist.barrier()
fluxlite.release_workspaces()
