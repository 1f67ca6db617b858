"""Per-replay device times of a one-call graph, queued behind a long sleep, against eager calls.
    torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-e/scripts/graphtime.py ag:8192,8192,7168 ..."""
import sys, statistics, torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.run import init_ranks, op_case
from fluxlite.profile.cli import parse_shape
tp, dev = init_ranks(torch_symm_mem=False)
for spec in sys.argv[1:]:
    shape = parse_shape(spec)[0]
    make, cases = op_case(shape, tp, torch.bfloat16, dev)
    x = make(); fused = cases["fused"]
    for _ in range(5): fused(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fused(x)
    runs = {"eager": lambda: fused(x), "graph": g.replay}
    out = {}
    for rep in range(3):
        for name, fn in runs.items():
            n = 20
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
            torch.cuda.synchronize(); dist.barrier()
            torch.cuda._sleep(200_000_000)  # ~0.1 s: every call queued before the first runs
            ev[0].record()
            for i in range(n):
                fn(); ev[i + 1].record()
            torch.cuda.synchronize()
            per = [ev[i].elapsed_time(ev[i + 1]) for i in range(n)]
            out.setdefault(name, []).append(per)
    if tp.rank == 0:
        for name, reps in out.items():
            for per in reps:
                print(f"{spec} {name}: total/20 {sum(per)/len(per):.4f} median {statistics.median(per):.4f} first3 {[round(p,3) for p in per[:3]]} max {max(per):.3f}", flush=True)
    del g
    fluxlite.release_workspaces()
dist.destroy_process_group()
