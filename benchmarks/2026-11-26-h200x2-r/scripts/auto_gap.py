"""Why auto's latency-mode call is slower than the forced call of its own choice at small M.
torchrun --nproc-per-node 2 auto_gap.py op:M,K,N ...  (shapes as fluxlite-profile's --shape)"""
import os, sys, statistics, cProfile, pstats, io
sys.path.insert(0, os.getcwd())
import torch
from fluxlite import dispatch
from fluxlite.timing import Timer, warmup_calls, warmup_input
from fluxlite.profile.run import op_case, init_ranks
from fluxlite.profile.cli import parse_shape

tp, device = init_ranks(os.environ.get("BACKEND", "nccl"))
timer = Timer(tp, device)
ROUNDS, SETS = 15, 3
names = ("sequential", "fused", "auto", "fused2")


def med(v):
    return statistics.median(v)


for text in sys.argv[1:]:
    for shape in parse_shape(text):
        make, cases = op_case(shape, tp, torch.bfloat16 if device.type == "cuda" else torch.float32, device)
        inputs = [make() for _ in range(SETS)]
        with dispatch.tuning():
            cases["auto"](inputs[0])
        modes = dispatch.describe_modes(dispatch.Key.of(shape.op, tp, inputs[0]["a"], inputs[0]["w"], shape.M))
        fns = {n: cases[n] for n in names if n in cases}
        op = getattr(__import__("fluxlite"), shape.op)
        def fused2(x):  # the forced fused call again, with an output of its own: a control of the noise
            out = x.get("out_fused2")
            if out is None:
                out = x["out_fused2"] = torch.empty_like(x["out_fused"])
            return op(x["a"], x["w"], group=tp.group, impl="fused", timeout=60, out=out)
        fns["fused2"] = fused2
        for mode in ("throughput", "latency"):
            with timer._marked(mode):
                for n in names:
                    for i in range(warmup_calls(3, SETS)):
                        fns[n](inputs[warmup_input(i, SETS)])
        res = {}
        # phase L: latency calls only; phase TL: each callable's throughput batch (10 calls) first, as the
        # timer's rounds do; phase X: sequential's batch before every callable's latency calls
        for phase in ("L", "TL"):
            lat = {n: [] for n in names}; host = {n: [] for n in names}; thr = {n: [] for n in names}
            for r in range(ROUNDS):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    fn = fns[n]
                    if phase == "TL":
                        thr[n].append(timer.throughput(fn, inputs, r, 30, 15.0)[0])
                    elif phase == "X":
                        timer.throughput(fns["sequential"], inputs, r, 10, 5.0)
                    timer.latency(fn, inputs[r % SETS])
                    lat[n].append(med([timer.latency(fn, inputs[r % SETS])[0] for _ in range(3)]))
                    host[n].append(timer.host(fn, inputs[(r + 1) % SETS], 5.0))
            red = timer.max_over_ranks([v for n in names for v in lat[n] + host[n]])
            k = 0
            for n in names:
                lat[n] = red[k:k + ROUNDS]; k += ROUNDS
                host[n] = red[k:k + ROUNDS]; k += ROUNDS
            res[phase] = {n: (1e3 * med(lat[n]), 1e3 * med(host[n])) for n in names}
            res[phase]["auto/fused"] = med([a / f for a, f in zip(lat["auto"], lat["fused"])])
            res[phase]["fused2/fused"] = med([a / f for a, f in zip(lat["fused2"], lat["fused"])])
            res[phase]["auto/seq"] = med([a / f for a, f in zip(lat["auto"], lat["sequential"])])
            if phase == "TL":
                t = timer.max_over_ranks([v for n in names for v in thr[n]])
                thr = {n: t[i * ROUNDS:(i + 1) * ROUNDS] for i, n in enumerate(names)}
                res["tp"] = {n: 1e3 * med(thr[n]) for n in names}
                res["tp_ratio"] = {n: med([a / s for a, s in zip(thr[n], thr["sequential"])]) for n in names}
        # host of 200 calls in a row each, the device asleep (per call us), and a cProfile of auto's
        hostrow = {}
        with timer._marked("latency"):
            for n in ("fused", "auto", "fused2", "fused", "auto", "fused2"):
                timer.align(); timer._sleep(80)
                import time
                t0 = time.perf_counter()
                for i in range(100):
                    fns[n](inputs[0])
                hostrow.setdefault(n, []).append((time.perf_counter() - t0) * 1e4)
                timer.sync()
            pr = cProfile.Profile()
            timer.align(); timer._sleep(80)
            pr.enable()
            for i in range(100):
                fns["auto"](inputs[0])
            pr.disable(); timer.sync()
        if tp.rank == 0:
            print(f"== {text} modes {({m: c.label for m, c in modes.items()} if modes else None)}", flush=True)
            print("  throughput us:", {n: round(v, 1) for n, v in res.pop("tp").items()}, "ratio to seq:",
                  {n: round(v, 3) for n, v in res.pop("tp_ratio").items()})
            for phase, v in res.items():
                print(f"  {phase}: " + "  ".join(f"{n} lat {v[n][0]:.0f}us host {v[n][1]:.0f}us" for n in names)
                      + f"  auto/fused {v['auto/fused']:.3f} fused2/fused {v['fused2/fused']:.3f} auto/seq {v['auto/seq']:.3f}", flush=True)
            print("  host per call in a loop of 100 (us):", {n: [round(x, 1) for x in v] for n, v in hostrow.items()})
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
            print("\n".join(s.getvalue().splitlines()[:30]), flush=True)
