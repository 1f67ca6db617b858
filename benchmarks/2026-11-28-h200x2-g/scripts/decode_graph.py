"""Decode-size calls, fused over sequential: eager calls queued back to back (auto's throughput
reading), a graph of 20 calls replayed, and a graph of one call replayed 20 times; each behind a
sleep, device time by events, median over rounds of the max over ranks.
    torchrun --nproc-per-node 2 decode_graph.py ag:8,8192,28672 ..."""
import statistics, sys
import torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.run import init_ranks, op_case
from fluxlite.profile.cli import parse_shape
from fluxlite.timing import Timer

tp, dev = init_ranks(torch_symm_mem=False)
timer = Timer(tp, dev)
N, ROUNDS = 20, 9
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
        g20 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g20):
            for _ in range(N):
                fn(x)
        torch.cuda.synchronize(); dist.barrier()
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            fn(x)
        torch.cuda.synchronize(); dist.barrier()
        g20.replay(); g1.replay(); torch.cuda.synchronize(); dist.barrier()
        fns[impl] = {"eager": (lambda _x, fn=fn: fn(x), N), "graph20": (lambda _x, g=g20: g.replay(), 1),
                     "graph1": (lambda _x, g=g1: g.replay(), N)}
    samples = {(i, m): [] for i in fns for m in fns[i]}
    keys = list(samples)
    for r in range(ROUNDS):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for impl, mode in order:
            fn, n = fns[impl][mode]
            ms, _ = timer.throughput(fn, [x], 0, n, sleep_ms=2.0)
            samples[(impl, mode)].append(timer.max_over_ranks([ms * n / N])[0])
    if tp.rank == 0:
        line = []
        for mode in ("eager", "graph20", "graph1"):
            s, f = samples[("sequential", mode)], samples[("fused", mode)]
            ratios = sorted(b / a for a, b in zip(s, f))
            line.append(f"{mode}: seq {statistics.median(s)*1e3:.1f} us fused {statistics.median(f)*1e3:.1f} us "
                        f"ratio {statistics.median(ratios):.3f} [{ratios[1]:.3f}-{ratios[-2]:.3f}]")
        print(f"{spec}: " + "; ".join(line), flush=True)
    del fns, x, make, cases
    torch.cuda.synchronize(); dist.barrier()
fluxlite.release_workspaces()
dist.destroy_process_group()
