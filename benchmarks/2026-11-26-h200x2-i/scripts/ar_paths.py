"""GEMM-AllReduce's fused paths (one-shot forced, two-shot) against matmul + NCCL all_reduce (torchrun,
2 GPUs). Each fused callable sets the one-shot budget before its call; distinct timeouts keep their
repeats and replay graphs apart."""
import os, sys, json, importlib
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer, time_rounds
G = importlib.import_module("fluxlite.ops.gemm_ar")
DEFAULT = G.ONE_SHOT_MAX_BYTES

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1].split()]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
timer = Timer(tp, torch.device("cuda"))
res = {}
PATHS = (("one_shot", 14.0, 1 << 40), ("two_shot", 13.0, 0), ("default", 12.0, DEFAULT))

def fused(budget, timeout):
    def f(x):
        G.ONE_SHOT_MAX_BYTES = budget
        return fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="fused", timeout=timeout, out=x["o"])
    return f

def seq(x):
    torch.matmul(x["a"], x["w"].t(), out=x["o"])
    dist.all_reduce(x["o"], group=tp.group)
    return x["o"]

def gemm(x):
    return torch.matmul(x["a"], x["w"].t(), out=x["o"])

for M, K, N in shapes:
    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    inputs = [dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
                   w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
                   o=torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    x = inputs[0]
    ref = x["a"].float() @ x["w"].float().t()
    dist.all_reduce(ref, group=tp.group)
    errs = {}
    for path, to, budget in PATHS:
        x["o"].fill_(float("nan"))
        y = fused(budget, to)(x)
        torch.cuda.synchronize()
        errs[path] = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    fns = {"gemm": gemm, "sequential": seq, **{p: fused(b, to) for p, to, b in PATHS}}
    times, _ = time_rounds(timer, fns, inputs, rounds=rounds, warmup=3)
    if rank == 0:
        t = {n: times[n]["throughput"] for n in fns}
        l = {n: times[n]["latency"] for n in fns}
        h = {n: times[n]["host"] for n in fns}
        names = [p for p, _, _ in PATHS]
        print(f"ar {M}x{K}->{N} ({M*N*2/2**20:.0f} MiB): tp ms " + " ".join(f"{n} {v:.3f}" for n, v in t.items())
              + " | tp/seq " + " ".join(f"{n} {t[n]/t['sequential']:.3f}" for n in names)
              + " | lat/seq " + " ".join(f"{n} {l[n]/l['sequential']:.3f}" for n in names)
              + " | host us " + " ".join(f"{n} {h[n]*1e3:.0f}" for n in fns)
              + " | err " + " ".join(f"{v:.1e}" for v in errs.values()), flush=True)
    res[f"{M},{K},{N}"] = dict(times=times, errs=errs)
    del inputs
    fluxlite.release_workspaces()
G.ONE_SHOT_MAX_BYTES = DEFAULT
if rank == 0 and os.environ.get("OUT"):
    json.dump(res, open(os.path.join(os.environ["OUT"], f"ar_paths_{os.getpid()}.json"), "w"), indent=1)
dist.destroy_process_group()
