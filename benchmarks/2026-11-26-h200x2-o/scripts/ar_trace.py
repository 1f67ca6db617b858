"""GEMM-AllReduce timelines: kineto traces of back-to-back fused calls (torchrun, 2 GPUs), per rank the
GPU events of two calls (split at the alignment kernel) with offsets; plus CUDA-event throughput of
cuBLAS alone, matmul + NCCL all_reduce, and fused. argv[1]: "M,K,N ..."."""
import os, sys, json, statistics
sys.path.insert(0, os.environ.get("SRC", os.getcwd()))
import torch, torch.distributed as dist
import fluxlite
from torch.profiler import profile, ProfilerActivity

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
OUT = os.environ.get("OUT", ".")
CALLS = 6


def tput(f, x, n=20, reps=5):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        torch.cuda._sleep(2_000_000)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            f(x)
        e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / n)
    t = torch.tensor([statistics.median(ts)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def short(name):
    for k in ("align_kernel", "one_shot_kernel", "split_wait", "finished_wait", "gemm_rs", "ag_gemm"):
        if k in name:
            return k
    if "Memcpy" in name or "memcpy" in name:
        return name[:40]
    if "nvjet" in name or "gemm" in name.lower() or "sm90" in name:
        return "cublas:" + name[:28]
    return name[:40]


for spec in sys.argv[1].split():
    M, K, N = (int(v) for v in spec.split(","))
    g = torch.Generator(device="cuda").manual_seed(5 + rank)
    x = dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
             w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
             o=torch.empty(M, N, device="cuda", dtype=torch.bfloat16))
    gemm = lambda x: torch.matmul(x["a"], x["w"].t(), out=x["o"])
    def seq(x):
        torch.matmul(x["a"], x["w"].t(), out=x["o"]); dist.all_reduce(x["o"], group=tp.group); return x["o"]
    fused = lambda x: fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="fused", timeout=15.0, out=x["o"])
    fns = dict(gemm=gemm, seq=seq, fused=fused)
    for f in fns.values():
        for _ in range(5):
            f(x)
    t = {n: tput(f, x) for n, f in fns.items()}
    torch.cuda.synchronize(); dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(1_000_000)
        for _ in range(CALLS):
            fused(x)
        torch.cuda.synchronize()
    path = os.path.join(OUT, f"ar_{M}x{K}x{N}_r{rank}.json")
    prof.export_chrome_trace(path)
    ev = [e for e in json.load(open(path))["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ev.sort(key=lambda e: e["ts"])
    starts = [i for i, e in enumerate(ev) if "align_kernel" in e["name"]]
    lines = [f"== ar {M}x{K}->{N} ({M*N*2/2**20:.1f} MiB) rank {rank}: tp ms gemm {t['gemm']:.4f} seq {t['seq']:.4f} "
             f"fused {t['fused']:.4f} fused/seq {t['fused']/t['seq']:.3f} fused/gemm {t['fused']/t['gemm']:.3f}"]
    if len(starts) >= 3:
        lo, hi = starts[-3], starts[-1]
        t0 = ev[lo]["ts"]
        period = ev[hi]["ts"] - ev[starts[-2]]["ts"]
        lines.append(f"   period {period:.1f} us (call {len(starts)-2}..{len(starts)-1})")
        for e in ev[lo:hi]:
            lines.append(f"   {e['ts']-t0:8.1f} +{e['dur']:7.1f}  s{e['args'].get('stream', '?'):<4} {short(e['name'])}")
    print("\n".join(lines), flush=True)
    fluxlite.release_workspaces()
    del x
dist.destroy_process_group()
