"""What a repeated auto call does at 228 gathered rows with SwiGLU and GELU: per-call wall time of 50 back-to-back
calls (host-bound here) for sequential, fused and auto after auto's first call; the dispatch entry points each
auto call reaches; a cProfile of 50 auto calls on rank 0."""
import os, sys, time, cProfile, pstats, io, importlib
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import fluxlite
from fluxlite import dispatch
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
AG = importlib.import_module("fluxlite.ops.ag_gemm").AG
counts = {}
for name in ("choose", "eager_choice_of", "_agree", "eager_choice", "_measure"):
    orig = getattr(dispatch, name)
    def wrap(*x, _o=orig, _n=name, **k):
        counts[_n] = counts.get(_n, 0) + 1
        return _o(*x, **k)
    setattr(dispatch, name, wrap)
orig_check, orig_run = AG.check, AG.run
def chk(*x, **k):
    counts["check"] = counts.get("check", 0) + 1
    return orig_check(*x, **k)
def run(*x, **k):
    counts["run:" + x[0].impl] = counts.get("run:" + x[0].impl, 0) + 1
    return orig_run(*x, **k)
AG.check, AG.run = chk, run
for M, K, n, act in [(228, 5872, 3160, "swiglu"), (228, 5872, 3160, "gelu"), (1942, 2384, 3344, "gelu")]:
    g = torch.Generator(device="cuda").manual_seed(M + K + n)
    a = torch.randn(M // 2, K, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(2 * n if act == "swiglu" else n, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(w.shape[0], device="cuda", generator=g).to(torch.bfloat16)
    fn = {x: (lambda x=x: fluxlite.ag_gemm(a, w, b, impl=x, activation=act)) for x in ("sequential", "fused", "auto")}
    fn["auto"]()
    for _ in range(2):
        for x, f in fn.items():
            for _ in range(3): f()
            torch.cuda.synchronize(); dist.barrier(); counts.clear()
            t = time.perf_counter()
            for _ in range(50): f()
            enq = (time.perf_counter() - t) / 50 * 1e6
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t) / 50 * 1e6
            if r == 0: print(f"{M}x{K}->{n} {act} {x:10s} enqueue {enq:6.1f} us wall {wall:6.1f} us per call {counts}", flush=True)
    if r == 0:
        print("   choices:", {k.text[:40]: (v.throughput.label, v.latency.label, v.both.label, sorted(v.warm)) for k, v in dispatch._MEMORY.items() if k.rows <= M + M // 8 and k.rows >= M - M // 8}, flush=True)
    pr = cProfile.Profile()
    torch.cuda.synchronize(); dist.barrier()
    pr.enable()
    for _ in range(50): fn["auto"]()
    pr.disable()
    torch.cuda.synchronize()
    if r == 0:
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[-4000:], flush=True)
dist.destroy_process_group()
