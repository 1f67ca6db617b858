"""GEMM-AllReduce's one-shot reduction kernel: the row-wise kernel (old_gemm_ar.py, the previous code) against
the flat one (fluxlite.kernels.gemm_ar), both on the one-shot path, interleaved in the same rounds, with
matmul + NCCL all_reduce, cuBLAS alone, and the two-shot path for calls over the one-shot budget.
torchrun, 2 GPUs. argv[1]: "M,K,N ..."; argv[2]: rounds."""
import os, sys, json, importlib
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.dirname(__file__))
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer, time_rounds
import old_gemm_ar
G = importlib.import_module("fluxlite.ops.gemm_ar")
NEW = G.kernel
DEFAULT = G.ONE_SHOT_MAX_BYTES

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1].split()]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
timer = Timer(tp, torch.device("cuda"))
res = {}


def fused(module, budget, timeout):
    def f(x):
        G.kernel, G.ONE_SHOT_MAX_BYTES = module, budget
        return fluxlite.gemm_ar(x["a"], x["w"], x.get("b"), group=tp.group, impl="fused", timeout=timeout, out=x["o"])
    return f


def seq(x):
    torch.matmul(x["a"], x["w"].t(), out=x["o"])
    dist.all_reduce(x["o"], group=tp.group)
    if "b" in x:
        x["o"] += x["b"]
    return x["o"]


def gemm(x):
    return torch.matmul(x["a"], x["w"].t(), out=x["o"])


for M, K, N in shapes:
    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    bias = os.environ.get("BIAS") == "1"
    inputs = [dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
                   w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
                   o=torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    if bias:
        b = torch.randn(N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3)).to(torch.bfloat16)
        for x in inputs:
            x["b"] = b
    x = inputs[0]
    ref = x["a"].float() @ x["w"].float().t()
    dist.all_reduce(ref, group=tp.group)
    if bias:
        ref += x["b"].float()
    big = 1 << 40
    fns = {"gemm": gemm, "sequential": seq, "old one shot": fused(old_gemm_ar, big, 62.0),
           "new one shot": fused(NEW, big, 61.0)}
    if os.environ.get("PATHS") == "1":
        del fns["old one shot"]
    if M * N * 2 > DEFAULT or os.environ.get("PATHS") == "1":
        fns["two shots"] = fused(NEW, 0, 60.0)
    errs = {}
    for name, f in fns.items():
        if name in ("gemm",):
            continue
        x["o"].fill_(float("nan"))
        y = f(x)
        torch.cuda.synchronize()
        errs[name] = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    times, _ = time_rounds(timer, fns, inputs, rounds=rounds, warmup=3)
    if rank == 0:
        t = {n: times[n]["throughput"] for n in fns}
        l = {n: times[n]["latency"] for n in fns}
        h = {n: times[n]["host"] for n in fns}
        names = [n for n in fns if n not in ("gemm", "sequential")]
        print(f"ar {M}x{K}->{N} ({M*N*2/2**20:.1f} MiB{' bias' if bias else ''}): tp us " + " ".join(f"{n}={v*1e3:.1f}" for n, v in t.items())
              + " | tp/seq " + " ".join(f"{n}={t[n]/t['sequential']:.3f}" for n in names)
              + " | lat/seq " + " ".join(f"{n}={l[n]/l['sequential']:.3f}" for n in names)
              + (" | new/old tp %.3f lat %.3f" % (t["new one shot"] / t["old one shot"], l["new one shot"] / l["old one shot"]) if "old one shot" in t else "")
              + (" | one/two tp %.3f lat %.3f" % (t["new one shot"] / t["two shots"], l["new one shot"] / l["two shots"]) if "two shots" in t else "")
              + " | err " + " ".join(f"{k}={v:.1e}" for k, v in errs.items()), flush=True)
    res[f"{M},{K},{N}"] = dict(times=times, errs=errs)
    del inputs
    fluxlite.release_workspaces()
G.kernel, G.ONE_SHOT_MAX_BYTES = NEW, DEFAULT
if rank == 0 and os.environ.get("OUT"):
    json.dump(res, open(os.path.join(os.environ["OUT"], f"ar_ab_{os.getpid()}.json"), "w"), indent=1)
dist.destroy_process_group()
