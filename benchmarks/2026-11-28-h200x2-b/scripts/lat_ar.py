"""Latency-mode GEMM-AllReduce calls (SH=MxKxN,...), both ranks: per shape, fused and sequential
alternating, 15 single calls each (barrier, sync, call, sync: wall and CUDA events), three input
sets rotating as the profiler does; then a kineto trace of 3 such fused calls.
-> prints medians; $R/lat_<shape>.<rank>.json.gz"""
import os, sys, time, gzip, shutil, statistics as st
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity
import fluxlite
SH = [tuple(int(v) for v in s.split("x")) for s in os.environ["SH"].split(",")]
tp = fluxlite.init(); rank = tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
def seq(a, w):
    y = a @ w.t(); dist.all_reduce(y); return y
for M, K, N in SH:
    sets = [(torch.randn(M, K, device=dev, dtype=torch.bfloat16), torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K**0.5) for _ in range(3)]
    fns = {"fused": lambda a, w: fluxlite.gemm_ar(a, w, impl="fused"), "seq": seq}
    for f in fns.values():
        for a, w in sets * 2:
            f(a, w)
    res = {k: ([], []) for k in fns}
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(15):
        for k, f in fns.items():
            a, w = sets[i % 3]
            torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
            t = time.perf_counter(); e0.record(); f(a, w); e1.record(); torch.cuda.synchronize()
            res[k][0].append((time.perf_counter() - t) * 1e3); res[k][1].append(e0.elapsed_time(e1))
    # queued, for reference
    q = {}
    for k, f in fns.items():
        torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
        torch.cuda._sleep(30_000_000); e0.record()
        for i in range(9):
            f(*sets[i % 3])
        e1.record(); torch.cuda.synchronize(); q[k] = e0.elapsed_time(e1) / 9
    line = " ".join(f"{k}: wall {st.median(v[0]):.3f} ({min(v[0]):.3f}-{max(v[0]):.3f}) ev {st.median(v[1]):.3f} q {q[k]:.3f}" for k, v in res.items())
    print(f"rank {rank} {M}x{K}x{N} {line}", flush=True)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(3):
            torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
            fns["fused"](*sets[i % 3]); torch.cuda.synchronize()
    p = os.path.join(os.environ["R"], f"lat_{M}x{K}x{N}.{rank}.json")
    prof.export_chrome_trace(p)
    with open(p, "rb") as src, gzip.open(p + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(p)
fluxlite.release_workspaces(); dist.destroy_process_group()
