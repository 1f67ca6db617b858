import os, sys, cProfile, pstats, time
sys.path.insert(0, os.getcwd())
import torch
from fluxlite import dispatch
from fluxlite.timing import Timer
from fluxlite.profile.run import op_case, init_ranks
from fluxlite.profile.cli import parse_shape
tp, device = init_ranks(os.environ.get("BACKEND", "gloo")); timer = Timer(tp, device)
shape = parse_shape(sys.argv[1])[0]
make, cases = op_case(shape, tp, torch.bfloat16 if device.type == "cuda" else torch.float32, device)
x = make()
with dispatch.tuning():
    cases["auto"](x)
impl = os.environ.get("IMPL", "sequential")
stats = {}
with dispatch.assume_mode("latency"):
    for n in (impl, "auto"):
        for _ in range(5):
            cases[n](x)
        timer.align(); timer._sleep(60)
        t0 = time.perf_counter()
        for _ in range(50):
            cases[n](x)
        us = (time.perf_counter() - t0) * 2e4
        timer.sync()
        timer.align(); timer._sleep(60)
        pr = cProfile.Profile(); pr.enable()
        for _ in range(50):
            cases[n](x)
        pr.disable(); timer.sync()
        if tp.rank == 0:
            print(n, "host us per call", round(us, 1), flush=True)
        st = pstats.Stats(pr); stats[n] = {k: v for k, v in st.stats.items()}
if tp.rank == 0:
    print(dispatch.describe_modes(dispatch.Key.of(shape.op, tp, x["a"], x["w"], shape.M)))
    a, b = stats[impl], stats["auto"]
    print("calls per call", impl, sum(v[1] for v in a.values()) / 50, "auto", sum(v[1] for v in b.values()) / 50)
    for k in sorted(set(a) | set(b), key=str):
        na = a.get(k, (0, 0))[1]; nb = b.get(k, (0, 0))[1]
        if na != nb:
            print(f"  {nb - na:+5d}  {k[0].split('/')[-1]}:{k[1]} {k[2]}")
    ta = {k: v[2] for k, v in a.items()}; tb = {k: v[2] for k, v in b.items()}
    print("own time per call, us (auto - impl), largest:")
    for k in sorted(set(ta) | set(tb), key=lambda k: -abs(tb.get(k, 0) - ta.get(k, 0)))[:15]:
        print(f"  {(tb.get(k, 0) - ta.get(k, 0)) * 2e4:+7.2f}  {k[0].split('/')[-1]}:{k[1]} {k[2]}")
