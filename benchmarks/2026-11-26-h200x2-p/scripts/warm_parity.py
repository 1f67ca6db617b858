"""Graphs captured inside the timed rounds, fused beside auto (AG 4096x8192->5120, auto's choices set by hand:
throughput the default fused call, latency fused[128x256x64 w8 s4 g16]), with this code's warm-up order
(PYTHONPATH picks the code). time_samples warms up and probes (rounds=0), then times 3 rounds; the graphs
and first sightings per plan are counted after each."""
import os, sys, statistics
import torch, torch.distributed as dist
import fluxlite
from fluxlite import dispatch
from fluxlite.dispatch import Choice, Choices
from fluxlite.kernels.gemm_core import GemmConfig
from fluxlite.timing import Timer, time_samples
from fluxlite.fused import states_of
from fluxlite.fused import call as fcall

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
dispatch._MEMORY[key] = Choices.of(Choice("fused", source="cache"), Choice("fused", cfg, source="cache"),
                                   Choice("fused", cfg, source="cache"))
fns = {"fused": lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="fused", timeout=30.0),
       "auto": lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="auto", timeout=30.0),
       "seq": lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="sequential")}
for f in fns.values():
    f(xs[0])
torch.cuda.synchronize()


def census():
    out = []
    for s in states_of(tp.group):
        for p in s.plans.values():
            gs = p.bound.graphs.values()
            out.append((sum(v is not fcall._SEEN_ONCE and v is not fcall._NO_GRAPH for v in gs),
                        sum(v is fcall._SEEN_ONCE for v in gs)))
    return out


_, batch = time_samples(timer, fns, xs, rounds=0, warmup=3, batch_ms=20.0, max_batch=30)
torch.cuda.synchronize(); after_warm = census()
samples, _ = time_samples(timer, fns, xs, rounds=3, batch=batch)
torch.cuda.synchronize(); after_rounds = census()
med = {n: {m: statistics.median(v) for m, v in s.items()} for n, s in samples.items()}
print(f"rank {rank}: (graphs, seen once) per plan after warm-up {after_warm}, after 3 rounds {after_rounds}; "
      + " ".join(f"{n} tp {med[n]['throughput']:.3f} lat {med[n]['latency']:.3f} [{' '.join(f'{v:.3f}' for v in samples[n]['latency'])}]"
                 for n in fns), flush=True)
dist.destroy_process_group()
