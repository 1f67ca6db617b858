"""Small AG-GEMM calls (the SMs' gather), sequential against fused: eager calls queued back to back
behind a sleep (device time per call), one call at a time (latency: wall and event time of one call
after the ranks meet), a user's graph of one call replayed 20 times behind a sleep, and host time
of one eager call. Median over rounds of the max over ranks.
    torchrun --nproc-per-node 2 small_ag.py ag:8,8192,28672 ..."""
import statistics, sys
import torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.run import init_ranks, op_case
from fluxlite.profile.cli import parse_shape
from fluxlite.timing import Timer

tp, dev = init_ranks(torch_symm_mem=False)
timer = Timer(tp, dev)
N, ROUNDS = 20, 7
for spec in sys.argv[1:]:
    shape = parse_shape(spec)[0]
    make, cases = op_case(shape, tp, torch.bfloat16, dev)
    x = make()
    fns = {}
    for impl in ("sequential", "fused"):
        fn = cases[impl]
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize(); dist.barrier()
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            fn(x)
        torch.cuda.synchronize(); dist.barrier()
        g1.replay(); torch.cuda.synchronize(); dist.barrier()
        fns[impl] = (fn, g1)
    samples = {(i, m): [] for i in fns for m in ("queued", "graph1", "latency", "lat_event", "host")}
    for r in range(ROUNDS):
        for impl in (("sequential", "fused") if r % 2 == 0 else ("fused", "sequential")):
            fn, g1 = fns[impl]
            ms, _ = timer.throughput(lambda _x: fn(x), [x], 0, N, sleep_ms=2.0)
            samples[(impl, "queued")].append(timer.max_over_ranks([ms])[0])
            ms, _ = timer.throughput(lambda _x: g1.replay(), [x], 0, N, sleep_ms=2.0)
            samples[(impl, "graph1")].append(timer.max_over_ranks([ms])[0])
            lat = [timer.latency(fn, x) for _ in range(5)]
            wall, ev = statistics.median(l[0] for l in lat), statistics.median(l[1] for l in lat)
            w, e = timer.max_over_ranks([wall, ev])
            samples[(impl, "latency")].append(w); samples[(impl, "lat_event")].append(e)
            h = statistics.median(timer.host(fn, x, 1.0) for _ in range(5))
            samples[(impl, "host")].append(timer.max_over_ranks([h])[0])
    if tp.rank == 0:
        line = []
        for mode in ("queued", "graph1", "latency", "lat_event", "host"):
            s, f = samples[("sequential", mode)], samples[("fused", mode)]
            ratios = sorted(b / a for a, b in zip(s, f))
            line.append(f"{mode} seq {statistics.median(s)*1e3:.1f} fused {statistics.median(f)*1e3:.1f} us "
                        f"x{statistics.median(ratios):.3f} [{ratios[1]:.3f}-{ratios[-2]:.3f}]")
        print(f"{spec}: " + "; ".join(line), flush=True)
    del fns, x, make, cases
    torch.cuda.synchronize(); dist.barrier()
fluxlite.release_workspaces()
dist.destroy_process_group()
