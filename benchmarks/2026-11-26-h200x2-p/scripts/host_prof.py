"""Host cost of a repeated fused GEMM-AllReduce call at decode sizes, and where it goes (torchrun, 2 GPUs).
Per shape: host us per call (median of 300, each issued while the GPU sleeps) of bare matmul, matmul+NCCL,
fluxlite sequential, fluxlite fused (eager, replayed internally), fluxlite auto, a user graph's replay of the fused
call; latency mode (time_rounds) of gemm, bare seq, fused, user graph; then a cProfile of 2000 fused calls on rank 0."""
import os, sys, time, statistics, cProfile, pstats, io
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer, time_rounds

tp = fluxlite.init()
rank = dist.get_rank()
timer = Timer(tp, torch.device("cuda"))
shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1].split()]
for M, K, N in shapes:
    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    xs = [dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
               w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
               o=torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    gemm = lambda x: torch.matmul(x["a"], x["w"].t(), out=x["o"])
    def bare(x):
        torch.matmul(x["a"], x["w"].t(), out=x["o"]); dist.all_reduce(x["o"], group=tp.group); return x["o"]
    seq = lambda x: fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="sequential", out=x["o"])
    fused = lambda x: fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="fused", timeout=30.0, out=x["o"])
    auto = lambda x: fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="auto", timeout=31.0, out=x["o"])
    for _ in range(6):
        for x in xs:
            fused(x)
    torch.cuda.synchronize()
    graphs = []
    for x in xs:
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            fluxlite.gemm_ar(x["a"], x["w"], group=tp.group, impl="fused", timeout=30.0, out=x["o"])
        graphs.append(gr)
    user_graph = lambda x: graphs[[id(y) for y in xs].index(id(x))].replay()
    fns = dict(gemm=gemm, bare=bare, seq=seq, fused=fused, auto=auto, user_graph=user_graph)
    for f in fns.values():
        for x in xs:
            f(x)
    torch.cuda.synchronize()
    host = {}
    for n, f in fns.items():
        ts = []
        for i in range(60):
            timer.align()
            torch.cuda._sleep(int(2 * timer.cycles_per_ms))
            for j in range(5):
                t0 = time.perf_counter(); f(xs[(i + j) % 3]); ts.append((time.perf_counter() - t0) * 1e6)
        host[n] = statistics.median(ts)
    times, _ = time_rounds(timer, {k: fns[k] for k in ("gemm", "bare", "seq", "fused", "auto", "user_graph")}, xs,
                           rounds=7, warmup=2)
    if rank == 0:
        print(f"== ar {M}x{K}->{N}: host us " + " ".join(f"{n}={v:.1f}" for n, v in host.items()), flush=True)
        for mode in ("throughput", "latency", "latency_event"):
            print(f"   {mode:13s} us " + " ".join(f"{n}={times[n][mode]*1e3:.1f}" for n in times)
                  + f" | fused/bare {times['fused'][mode]/times['bare'][mode]:.3f} graph/bare "
                  f"{times['user_graph'][mode]/times['bare'][mode]:.3f} gemm/bare {times['gemm'][mode]/times['bare'][mode]:.3f}",
                  flush=True)
    pr = cProfile.Profile()
    for i in range(0 if os.environ.get('NOPROF') else 10):
        timer.align()
        torch.cuda._sleep(int(20 * timer.cycles_per_ms))
        pr.enable()
        for j in range(150):
            fused(xs[j % 3])
        pr.disable()
    torch.cuda.synchronize()
    if rank == 0 and not os.environ.get('NOPROF'):
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28); print(s.getvalue()[-6000:])
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(28); print(s.getvalue()[-6000:])
    if rank == 0 and os.environ.get("FLUXLITE_CACHE_DIR"):
        import json, glob
        for f in glob.glob(os.path.join(os.environ["FLUXLITE_CACHE_DIR"], "*.json")):
            for k, e in json.load(open(f)).get("entries", {}).items():
                if f"{K}" in k and f"{N}" in k:
                    print("   dispatch", k, json.dumps({m: (c.get("impl"), c.get("config")) for m, c in e.get("modes", {}).items()}),
                          json.dumps(e.get("times_ms", {}))[:900], flush=True)
    del graphs
    fluxlite.release_workspaces()
dist.destroy_process_group()
