"""Why an auto call that runs fused costs more host time than an explicit fused call (torchrun, 2 GPUs)."""
import os, sys, time, statistics, collections
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite import dispatch, ops
from fluxlite.fused import call as callmod, state as st
from fluxlite.timing import Timer
from fluxlite.profile.run import declared_mode

tp = fluxlite.init()
rank = dist.get_rank()
W = tp.world_size
cnt = collections.Counter()
def wrap(obj, name, tag, result=None):
    orig = getattr(obj, name)
    def f(*a, **k):
        r = orig(*a, **k)
        cnt[tag + ("" if result is None else ":" + str(result(r)))] += 1
        return r
    setattr(obj, name, f)
wrap(ops.AG, "prepare", "prepare")
wrap(ops.AG, "check", "check")
wrap(callmod.Call, "_replay", "replay", result=bool)
wrap(st.FusedState, "capture", "capture")
orig_rep = ops.AG._repeat
def rep(*a, **k):
    r = orig_rep(*a, **k)
    cnt["repeat:" + ("hit" if r[1] is not None else "miss")] += 1
    return r
ops.AG._repeat = rep

M, K, N = 1536, 5120, 6912
inputs = [dict(a=torch.randn(M // W, K, device="cuda", dtype=torch.bfloat16),
               w=(torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)) for _ in range(3)]
timer = Timer(tp, torch.device("cuda"))
mk = lambda impl: (lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl=impl, timeout=60))
fns = {"fused": mk("fused"), "auto": declared_mode(timer, mk("auto"))}
with dispatch.tuning():
    fns["auto"](inputs[0])
key = dispatch.Key.of("ag_gemm", tp, inputs[0]["a"], inputs[0]["w"], M)
if rank == 0: print("choices", dispatch._MEMORY.get(key), flush=True)
for name, fn in fns.items():
    for mode in ("throughput", "latency"):
        with timer._marked(mode):
            for i in range(12):
                fn(inputs[i % 3])
torch.cuda.synchronize()
for phase in range(2):
    for name, fn in fns.items():
        cnt.clear()
        hs = []
        for i in range(24):
            hs.append(timer.host(fn, inputs[i % 3], 3.0))
        lat = [timer.latency(fn, inputs[i % 3])[0] for i in range(12)]
        if rank == 0:
            print(f"{name}: host us {statistics.median(hs)*1e3:.1f}, latency ms {statistics.median(lat):.3f}, {dict(cnt)}", flush=True)
# which plan / replay keys
if rank == 0:
    import cProfile, pstats
    for name in fns:
        pr = cProfile.Profile(); timer.align(); pr.enable()
        for i in range(40):
            with timer._marked("latency"):
                fns[name](inputs[i % 3])
        pr.disable(); torch.cuda.synchronize()
        print("==", name); pstats.Stats(pr).sort_stats("cumtime").print_stats(14)
else:
    for name in fns:
        timer.align()
        for i in range(40):
            with timer._marked("latency"):
                fns[name](inputs[i % 3])
        torch.cuda.synchronize()
dist.barrier()
