"""Why auto's latency reading exceeds forced fused's when both run fused: count replays, captures and
eager (no-graph) fused calls per callable and timer mode, and print per-round latencies.
    torchrun --standalone --nproc-per-node W .scratch/s41/diag.py"""
import collections, statistics, sys, time, torch, torch.distributed as dist
import fluxlite
from fluxlite import dispatch
from fluxlite.fused import call as callmod, state as statemod
from fluxlite.profile.run import init_ranks, op_case
from fluxlite.profile.presets import Shape
from fluxlite.timing import Timer, time_samples, per_round
tp, dev = init_ranks(torch_symm_mem=False)
W, r = tp.world_size, tp.rank
timer = Timer(tp, dev)
CUR = ["?"]
counts = collections.Counter()
orig_replay = callmod.Call._replay
def replay(self, key, *a, **k):
    ok = orig_replay(self, key, *a, **k)
    counts[(CUR[0], timer.mode, "replay" if ok else ("nokey" if key is None else "eager"))] += 1
    return ok
callmod.Call._replay = replay
orig_capture = statemod.FusedState.capture
def capture(self, *a, **k):
    counts[(CUR[0], timer.mode, "capture")] += 1
    return orig_capture(self, *a, **k)
statemod.FusedState.capture = capture
shapes = [s.split(":") for s in sys.argv[1:]] or [("ag", "64,8192,2560"), ("rs", "600,3584,6000"), ("ag", "520,5120,3456")]
for op, dims in shapes:
    M, K, N = map(int, dims.split(","))
    shape = Shape({"ag": "ag_gemm", "rs": "gemm_rs"}[op], M, K, N)
    make, cases = op_case(shape, tp, torch.bfloat16, dev)
    fns = {}
    for name in ("sequential", "fused", "auto"):
        def f(x, fn=cases[name], name=name):
            CUR[0] = name
            return fn(x)
        fns[name] = f
    inputs = [make() for _ in range(3)]
    for fn in fns.values():
        fn(inputs[0]); timer.sync()
    counts.clear()
    samples, batch = time_samples(timer, fns, inputs, rounds=9, warmup=3)
    pr = per_round(timer, samples, list(fns), ["latency", "throughput", "host", "eager"])
    if r == 0:
        print(f"== {op} {M}x{K}->{N} W={W} batch={batch}")
        for name in fns:
            print(f"  {name:10s} lat " + " ".join(f"{v*1e3:6.1f}" for v in pr[name]["latency"])
                  + f" | med {statistics.median(pr[name]['latency'])*1e3:.1f} thr {statistics.median(pr[name]['throughput'])*1e3:.1f}"
                  f" host {statistics.median(pr[name]['host'])*1e3:.1f} eager {statistics.median(pr[name]['eager'])*1e3:.1f}")
        for k in sorted(counts, key=str):
            print("   ", k, counts[k])
        print("   auto:", dispatch.describe_modes(dispatch.Key.of(shape.op, tp, inputs[0]["a"], inputs[0]["w"], M)))
fluxlite.release_workspaces()
dist.destroy_process_group()
