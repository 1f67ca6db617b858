"""A decode forward (sequence parallel, or replicated rows with GEMM-AllReduce in the Row layers) of bench_inference's stack, replayed from a CUDA graph, with
one linear kind at a time fused and the rest sequential: device time per forward (20 replays behind a
sleep, median of rounds, max over ranks), and a profiler trace of replays: device us per kernel kind.
    torchrun --nproc-per-node 2 decode_ctx.py [tokens] [sp|replicated]"""
import collections, importlib.util, statistics, sys
import torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.run import init_ranks
from fluxlite.timing import Timer

spec = importlib.util.spec_from_file_location("bi", "scripts/bench_inference.py")
bi = importlib.util.module_from_spec(spec); spec.loader.exec_module(bi)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 8
layout = sys.argv[2] if len(sys.argv) > 2 else "sp"
tp, dev = init_ranks(torch_symm_mem=False)
timer = Timer(tp, dev)
a = bi.parse_args(["--layers", "2"])
dtype = torch.bfloat16
stack = bi.Stack(a, tp, dtype, dev)
case = dict(name=f"decode-{tokens}", phase="decode", tokens=tokens, layout=layout)
x, caches, sp = bi.case_inputs(a, case, tp.world_size, dev, dtype)
KINDS = ("qkv", "proj", "fc1", "fc2")
VARIANTS = {"seq": (), "fc1": ("fc1",), "qkv": ("qkv",), "fc2": ("fc2",), "proj": ("proj",), "all": KINDS}
if not sp:  # the Column layers are local: only the Row layers communicate
    VARIANTS = {"seq": (), "fc2": ("fc2",), "proj": ("proj",), "all": KINDS}


def configure(fused):
    stack.configured = None
    for layer in stack.layers:
        for kind in KINDS:
            lin = getattr(layer, kind)
            lin.overlap = "fused" if kind in fused else "sequential"
            lin.sequence_parallel = sp


graphs = {}
with torch.no_grad():
    configure(KINDS)
    stack(x, "fused", caches)  # the workspace at its size before any graph
    torch.cuda.synchronize()
    for name, fused in VARIANTS.items():
        configure(fused)
        for _ in range(3):
            stack(x, "fused", caches)
        torch.cuda.synchronize(); dist.barrier()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = stack(x, "fused", caches)
        torch.cuda.synchronize(); dist.barrier()
        graphs[name] = g
N, ROUNDS = 20, 9
samples = {k: [] for k in graphs}
keys = list(graphs)
for r in range(ROUNDS):
    for k in keys[r % len(keys):] + keys[:r % len(keys)]:
        ms, _ = timer.throughput(lambda _x, g=graphs[k]: g.replay(), [None], 0, N, sleep_ms=3.0)
        samples[k].append(timer.max_over_ranks([ms])[0])
if tp.rank == 0:
    base = samples["seq"]
    for k in keys:
        ratios = sorted(b / s for s, b in zip(base, samples[k]))
        print(f"decode-{tokens} {layout} fused {k}: {statistics.median(samples[k])*1e3:.1f} us per forward, over seq "
              f"{statistics.median(ratios):.3f} [{ratios[1]:.3f}-{ratios[-2]:.3f}]", flush=True)
# where the time goes: kernels of 10 replays, by name, us per forward
for k in ("seq", "fc1" if sp else "fc2", "all"):
    timer.align()
    torch.cuda._sleep(int(2.0 * timer.cycles_per_ms))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            graphs[k].replay()
        torch.cuda.synchronize()
    agg = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name[:70]] += e.device_time / 10
    rows = sorted(agg.items(), key=lambda t: -t[1])[:14]
    for rank in range(tp.world_size):
        if rank == tp.rank:
            print(f"[rank {rank}] {k}: total {sum(agg.values()):.1f} us/forward: " +
                  "; ".join(f"{n} {t:.1f}" for n, t in rows), flush=True)
        dist.barrier()
del graphs
torch.cuda.synchronize(); dist.barrier()
fluxlite.release_workspaces()
dist.destroy_process_group()
