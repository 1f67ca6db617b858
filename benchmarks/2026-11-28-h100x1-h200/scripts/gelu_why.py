"""Why AG-GEMM with GELU runs slower than without, fused, at K off 64 (TP=2): times of fused and
sequential with no bias, a bias, and bias+GELU; then rank 0's kernel table for five calls of each fused."""
import os, statistics as st, torch, torch.distributed as dist
import fluxlite
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
def timeit(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
    for _ in range(n): fn()
    e.record(); e.synchronize(); return s.elapsed_time(e) / n
for M, K, n in ((8192, 5000, 7000), (6000, 7000, 10000), (8192, 8192, 3584)):
    a = torch.randn(M // 2, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda").to(torch.bfloat16)
    cases = {}
    for impl in ("fused", "sequential"):
        for name, kw in (("plain", dict()), ("bias", dict(bias=b)), ("gelu", dict(bias=b, activation="gelu"))):
            fn = lambda: fluxlite.ag_gemm(a, w, impl=impl, **kw)
            cases[(impl, name)] = st.median(timeit(fn) for _ in range(3))
    if r == 0:
        print(f"{M}x{K}->{n}: " + ", ".join(f"{i} {nm} {t:.3f}" for (i, nm), t in cases.items()), flush=True)
    if (M, K) == (8192, 5000):
        for name, kw in (("plain", dict()), ("gelu", dict(bias=b, activation="gelu"))):
            torch.cuda.synchronize(); dist.barrier()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5): fluxlite.ag_gemm(a, w, impl="fused", **kw)
                torch.cuda.synchronize()
            if r == 0:
                print(f"--- fused {name}, 5 calls", flush=True)
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70), flush=True)
dist.destroy_process_group()
