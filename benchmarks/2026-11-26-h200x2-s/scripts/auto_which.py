"""Which implementation auto runs in each mode inside the profiler's own rounds (time_samples), and its latency
against the forced fused call, per round. torchrun --nproc-per-node 2 auto_which.py op:M,K,N ..."""
import os, sys, statistics
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import torch
from fluxlite import dispatch
from fluxlite.ops import OPS
from fluxlite.timing import Timer, time_samples, per_round
from fluxlite.profile.run import op_case, init_ranks
from fluxlite.profile.cli import parse_shape
from dist_utils import count_runs

tp, device = init_ranks(os.environ.get("BACKEND", "nccl"))
timer = Timer(tp, device)
log = []
real_latency = Timer.latency
def latency(self, fn, x):
    before = dict(runs)
    res = real_latency(self, fn, x)
    if getattr(fn, "tag", None) == "auto":
        log.append(("L", self.mode, tuple(k for k in runs if runs[k] != before[k])))
    return res
Timer.latency = latency
real_tp = Timer.throughput
def throughput(self, fn, inputs, first, n, sleep_ms):
    before = dict(runs)
    res = real_tp(self, fn, inputs, first, n, sleep_ms)
    if getattr(fn, "tag", None) == "auto":
        log.append(("T", self.mode, tuple(f"{k}:{runs[k]-before[k]}" for k in runs if runs[k] != before[k])))
    return res
Timer.throughput = throughput
for text in sys.argv[1:]:
    for shape in parse_shape(text):
        make, cases = op_case(shape, tp, torch.bfloat16 if device.type == "cuda" else torch.float32, device)
        op = OPS[shape.op]
        runs = count_runs(op, ("sequential", "decomposed", "fused"))
        inputs = [make() for _ in range(3)]
        with dispatch.tuning():
            cases["auto"](inputs[0])
        fns = {n: cases[n] for n in ("sequential", "fused", "auto")}
        fns["auto"] = lambda x, f=cases["auto"]: f(x)
        fns["auto"].tag = "auto"
        log.clear()
        samples, _ = time_samples(timer, fns, inputs, rounds=9)
        pr = per_round(timer, samples, list(fns), ["latency", "host"])
        if tp.rank == 0:
            modes = dispatch.describe_modes(dispatch.Key.of(shape.op, tp, inputs[0]["a"], inputs[0]["w"], shape.M))
            print(f"== {text} modes {({m: c.label for m, c in modes.items()} if modes else None)}")
            print("  auto/fused latency per round:", [round(a / f, 3) for a, f in zip(pr["auto"]["latency"], pr["fused"]["latency"])])
            print("  latency ms auto", [round(v, 3) for v in pr["auto"]["latency"]], "fused", [round(v, 3) for v in pr["fused"]["latency"]])
            print("  host ms auto", [round(v, 3) for v in pr["auto"]["host"]], "fused", [round(v, 3) for v in pr["fused"]["host"]])
            from collections import Counter
            print("  auto's calls in the rounds:", Counter(log))
