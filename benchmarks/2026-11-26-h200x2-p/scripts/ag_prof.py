"""Where an eager fused AG-GEMM / GEMM-RS call's host time goes once it replays its graph (torchrun, 2 GPUs):
host us per call in a loop and right after a sync, then cProfile of 300 calls on rank 0."""
import os, sys, time, statistics, cProfile, pstats, io
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
timer = Timer(tp, torch.device("cuda"))
dev = torch.device("cuda", torch.cuda.current_device())
for op, M, K, N in (("ag", 4096, 8192, 5120), ("rs", 4096, 4096, 8192), ("ag", 128, 4096, 2048)):
    if op == "ag":
        a, w = torch.randn(M // W, K, device=dev, dtype=torch.bfloat16), torch.randn(N // W, K, device=dev, dtype=torch.bfloat16)
        f = lambda: fluxlite.ag_gemm(a, w, impl="fused")
    else:
        a, w = torch.randn(M, K // W, device=dev, dtype=torch.bfloat16), torch.randn(N, K // W, device=dev, dtype=torch.bfloat16)
        f = lambda: fluxlite.gemm_rs(a, w, impl="fused")
    for _ in range(8):
        f()
    torch.cuda.synchronize()
    loop, cold = [], []
    for i in range(20):
        timer.align(); torch.cuda._sleep(int(20 * timer.cycles_per_ms))
        t0 = time.perf_counter()
        for j in range(10):
            f()
        loop.append((time.perf_counter() - t0) / 10 * 1e6)
        timer.align(); torch.cuda._sleep(int(5 * timer.cycles_per_ms))
        t0 = time.perf_counter(); f(); cold.append((time.perf_counter() - t0) * 1e6)
    pr = cProfile.Profile()
    for i in range(30):
        timer.align(); torch.cuda._sleep(int(20 * timer.cycles_per_ms))
        pr.enable()
        for j in range(10):
            f()
        pr.disable()
    torch.cuda.synchronize()
    if rank == 0:
        print(f"== {op} {M}x{K}->{N}: host us per call in a loop {statistics.median(loop):.1f}, after a sync "
              f"{statistics.median(cold):.1f}", flush=True)
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue()[-4500:], flush=True)
    fluxlite.release_workspaces()
dist.destroy_process_group()
