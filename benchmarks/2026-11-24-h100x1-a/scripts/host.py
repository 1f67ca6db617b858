"""Host us of one call, each timed after a sync and while the GPU sleeps (no queue back-pressure);
interleaved over rounds; rank 0 prints medians.

--warm (ninth session): instead, n calls back to back behind one long sleep, per call: the enqueue
cost a training loop pays per call while the GPU is busy (less noisy than one call after a sync)."""
import os, sys, time, statistics, argparse
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
ap = argparse.ArgumentParser(); ap.add_argument("--shapes", default="2048,4096,4096;8192,8192,14336;992,2048,2816;128,4096,2048")
ap.add_argument("--rounds", type=int, default=5); ap.add_argument("--n", type=int, default=20)
ap.add_argument("--warm", action="store_true")
args = ap.parse_args()
tp = fluxlite.init(); W = tp.world_size
rows = []
for shape in args.shapes.split(";"):
    M, K, N = map(int, shape.split(","))
    M -= M % W
    bf = torch.bfloat16
    a_ag = torch.randn(M // W, K, device="cuda", dtype=bf); w_ag = torch.randn(N // W, K, device="cuda", dtype=bf)
    a_rs = torch.randn(M, K // W, device="cuda", dtype=bf); w_rs = torch.randn(N, K // W, device="cuda", dtype=bf)
    full = torch.randn(M, K, device="cuda", dtype=bf)
    fns = {"matmul": lambda: torch.matmul(full, w_ag.t()),
           "ag_fused": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused"),
           "ag_fused_keep": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused", return_gathered=True),
           "rs_fused": lambda: fluxlite.gemm_rs(a_rs, w_rs, impl="fused")}
    for f in fns.values():
        for _ in range(4): f()
    fluxlite.synchronize(); torch.cuda.synchronize(); dist.barrier()
    ts = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, f in fns.items():
            if args.warm:
                dist.barrier(); torch.cuda._sleep(200_000_000)
                t0 = time.perf_counter()
                for _ in range(args.n): f()
                ts[k].append((time.perf_counter() - t0) / args.n)
                fluxlite.synchronize(); torch.cuda.synchronize()
                continue
            for _ in range(args.n):
                torch.cuda.synchronize()
                torch.cuda._sleep(1_000_000)
                t0 = time.perf_counter(); r = f(); ts[k].append(time.perf_counter() - t0); del r
        fluxlite.synchronize(); dist.barrier()
    med = {k: 1e6 * statistics.median(v) for k, v in ts.items()}
    t = torch.tensor(list(med.values()), dtype=torch.float64)
    allt = [torch.zeros_like(t) for _ in range(W)]
    dist.all_gather_object(allt, t)
    mx = torch.stack(allt).max(0).values.tolist()
    rows.append((shape, dict(zip(med, mx))))
if tp.rank == 0:
    print("host us per call (max over ranks of per-rank medians), " + ("back to back behind a sleep:" if args.warm else "one call after a sync:"))
    for shape, d in rows:
        print(f"{shape:>18s}  " + "  ".join(f"{k} {v:6.1f}" for k, v in d.items())
              + f"  | ag/mm {d['ag_fused']/d['matmul']:.2f} keep/mm {d['ag_fused_keep']/d['matmul']:.2f} rs/mm {d['rs_fused']/d['matmul']:.2f}")
fluxlite.synchronize(); fluxlite.release_workspaces(); dist.destroy_process_group()
