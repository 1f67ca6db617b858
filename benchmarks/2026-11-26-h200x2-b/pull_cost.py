"""AG push vs pull (return_gathered) vs sequential, throughput (back-to-back) and latency (synced), per call ms.
torchrun --nproc-per-node 2 .scratch/pull_cost.py"""
import time, torch, torch.distributed as dist, fluxlite
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
BF16 = torch.bfloat16
def timeit(fn, n=30, sync_each=False):
    for _ in range(5): fn()
    torch.cuda.synchronize(); dist.barrier()
    if sync_each:
        ts = []
        for _ in range(n):
            dist.barrier(); torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
        ts.sort(); return 1e3 * ts[len(ts) // 2]
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n
for m, K, N in [(2048, 8192, 3584), (4096, 8192, 7168), (1024, 4096, 14336), (4096, 5120, 6912)]:
    a = torch.randn(m, K, device="cuda", dtype=BF16); w = torch.randn(N, K, device="cuda", dtype=BF16) / K**0.5
    res = {}
    for name, kw in [("seq", dict(impl="sequential", return_gathered=True)), ("push", dict(impl="fused")),
                     ("pull", dict(impl="fused", return_gathered=True))]:
        f = lambda: fluxlite.ag_gemm(a, w, **kw)
        res[name] = (timeit(f), timeit(f, sync_each=True))
    if r == 0:
        print(f"ag {m}x{K}->{N}: " + "  ".join(f"{k} thr {v[0]:.3f} lat {v[1]:.3f}" for k, v in res.items())
              + f"  | pull/push thr {res['pull'][0]/res['push'][0]:.3f} pull/seq thr {res['pull'][0]/res['seq'][0]:.3f}", flush=True)
dist.destroy_process_group()
