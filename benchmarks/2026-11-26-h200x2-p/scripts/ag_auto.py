"""auto whose latency choice is a named kernel config, against forced fused, AG 4096x8192->5120 (torchrun, 2 GPUs):
the profile test found auto 2x the best in latency mode there. Injects the choices the --tune run made
(throughput: the default fused call; latency and both: fused[128x256x64 w8 s4 g16]) and times both modes,
then each single latency call of auto, with plan builds, graphs and workspace generation before and after."""
import os, sys, time, statistics
import torch, torch.distributed as dist
import fluxlite
from fluxlite import dispatch
from fluxlite.dispatch import Choice, Choices
from fluxlite.kernels.gemm_core import GemmConfig
from fluxlite.timing import Timer, time_rounds
from fluxlite.fused import states_of

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
timer = Timer(tp, torch.device("cuda"))
M, K, N = 4096, 8192, 5120
m = M // W
g = torch.Generator(device="cuda").manual_seed(3 + rank)
xs = [dict(a=torch.randn(m, K, device="cuda", generator=g).to(torch.bfloat16),
           w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16)) for _ in range(3)]
cfg = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, group_m=16)
key = dispatch.Key.of("ag_gemm", tp, xs[0]["a"], xs[0]["w"], M)
thr = Choice("fused", source="cache"); lat = Choice("fused", cfg, source="cache")
dispatch._MEMORY[key] = Choices.of(thr, lat, lat)
fused = lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="fused", timeout=30.0)
auto = lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="auto", timeout=30.0)
ws_state = lambda: [(s.plan_builds, s.ws.generation, sum(len(p.bound.graphs) for p in s.plans.values()), s.epoch)
                    for s in states_of(tp.group)]
for f in (fused, auto):
    f(xs[0])
torch.cuda.synchronize()
print(rank, "after first calls: (plan builds, generation, graphs, epoch)", ws_state(), flush=True)
times, _ = time_rounds(timer, {"fused": fused, "auto": auto}, xs, rounds=5, warmup=3)
print(rank, "after time_rounds", ws_state(), flush=True)
if rank == 0:
    for mode in ("throughput", "latency", "latency_event", "host"):
        print(f"{mode:13s} ms fused={times['fused'][mode]:.3f} auto={times['auto'][mode]:.3f} auto/fused "
              f"{times['auto'][mode]/times['fused'][mode]:.3f}", flush=True)
for label, f, mode in (("auto lat", auto, "latency"), ("fused lat", fused, "latency"), ("auto thr-declared", auto, "throughput")):
    ts = []
    with dispatch.assume_mode(mode):
        for i in range(12):
            ts.append(timer.latency(f, xs[i % 3])[0])
    if rank == 0:
        print(label, " ".join(f"{t:.3f}" for t in ts), flush=True)
print(rank, "end", ws_state(), flush=True)
dist.destroy_process_group()
