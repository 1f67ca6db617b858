"""Latency-mode calls with and without fluxlite's internal replays (both ranks, one process):
per case, 'replay' (default: a recurring eager call replays its graph), 'eager' (Call._replay
disabled: the call's launches enqueued one by one) and 'seq', alternating; 15 single calls each
(barrier, sync, call, sync: wall and CUDA events), three input sets rotating; then 9 queued calls
behind a sleep. Prints medians (max over ranks)."""
import os, sys, time, statistics as st
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite.fused import call as fcall
tp = fluxlite.init(); rank = tp.rank; W = tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
bf = torch.bfloat16
real_replay = fcall.Call._replay
def no_replay(self, *a, **k):
    return False
CASES = [("ar", 2048, 8192, 8192), ("ar", 4096, 13824, 8192), ("ar", 6144, 11000, 5000), ("ar", 8192, 14336, 8192),
         ("ag", 8192, 8192, 7168), ("rs", 8192, 7168, 8192), ("ag", 2048, 4096, 6144)]
for op, M, K, N in CASES:
    m = M // W if op == "ag" else M
    sets = [(torch.randn(m, K, device=dev, dtype=bf), torch.randn(N, K, device=dev, dtype=bf) / K**0.5) for _ in range(3)]
    fused = getattr(fluxlite, {"ar": "gemm_ar", "ag": "ag_gemm", "rs": "gemm_rs"}[op])
    fns = {"replay": lambda a, w: fused(a, w, impl="fused"), "eager": lambda a, w: fused(a, w, impl="fused"),
           "seq": lambda a, w: fused(a, w, impl="sequential")}
    def run(k, a, w):
        fcall.Call._replay = no_replay if k == "eager" else real_replay
        return fns[k](a, w)
    for k in fns:
        for a, w in sets * 2:
            run(k, a, w)
    res = {k: ([], []) for k in fns}
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(15):
        for k in fns:
            a, w = sets[i % 3]
            torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
            t = time.perf_counter(); e0.record(); run(k, a, w); e1.record(); torch.cuda.synchronize()
            res[k][0].append((time.perf_counter() - t) * 1e3); res[k][1].append(e0.elapsed_time(e1))
    q = {}
    for k in fns:
        torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
        torch.cuda._sleep(30_000_000); e0.record()
        for i in range(9):
            run(k, *sets[i % 3])
        e1.record(); torch.cuda.synchronize(); q[k] = e0.elapsed_time(e1) / 9
    fcall.Call._replay = real_replay
    vals = torch.tensor([[st.median(res[k][0]), st.median(res[k][1]), q[k]] for k in fns], device=dev, dtype=torch.float64)
    dist.all_reduce(vals, op=dist.ReduceOp.MAX)
    if rank == 0:
        v = vals.tolist()
        print(f"{op} {M}x{K}->{N}: " + "  ".join(f"{k}: wall {x[0]:.3f} ev {x[1]:.3f} q {x[2]:.3f}" for k, x in zip(fns, v))
              + f"  | eager/replay wall {v[1][0]/v[0][0]:.3f} ev {v[1][1]/v[0][1]:.3f} q {v[1][2]/v[0][2]:.3f}; replay/seq wall {v[0][0]/v[2][0]:.3f}; eager/seq wall {v[1][0]/v[2][0]:.3f}", flush=True)
fluxlite.release_workspaces(); dist.destroy_process_group()
