"""`auto` with an activation against the best of its candidates: AG-GEMM (GELU, SwiGLU; bias) at shapes given as
SHAPES=MxKxn,... (M gathered rows, n output columns per rank), TP=2; fused, decomposed, sequential and auto,
throughput (20 calls back to back) and latency (a barrier and a sync around each call), three rounds interleaved,
medians. One line per case: auto / best in each mode, and each candidate / sequential."""
import os, statistics as st, sys, json
import torch, torch.distributed as dist
sys.path.append(os.getcwd())
import fluxlite

dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ["SHAPES"].split(",")]
NAMES = ("fused", "decomposed", "sequential", "auto")
def timeit(fn, mode, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    if mode == "tp":
        s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
        for _ in range(n): fn()
        e.record(); e.synchronize(); return s.elapsed_time(e) / n
    ts = []
    for _ in range(n // 2):
        dist.barrier(); torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return st.median(ts)
rows = []
if r == 0: print("fluxlite from", fluxlite.__file__, flush=True)
for M, K, n in SHAPES:
    for act in os.environ.get("ACTS", "gelu,swiglu").split(","):
        g = torch.Generator(device="cuda").manual_seed(M + K + n)
        RS = act == "rs"  # GEMM-RS: a [M, K] per rank, out [M/2, n]
        AR = act == "ar"  # GEMM-AllReduce: a [M, K] per rank, out [M, n]
        a = torch.randn(M if RS or AR else M // 2, K, device="cuda", generator=g).to(torch.bfloat16)
        w = (torch.randn(2 * n if act == "swiglu" else n, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
        b = torch.randn(w.shape[0], device="cuda", generator=g).to(torch.bfloat16)
        call = (lambda impl: fluxlite.gemm_rs(a, w, b, impl=impl)) if RS else \
            (lambda impl: fluxlite.gemm_ar(a, w, b, impl=impl)) if AR else \
            (lambda impl: fluxlite.ag_gemm(a, w, b, impl=impl, activation=None if act == "none" else act))
        ref = call("sequential").float()
        res = {}
        for _round in range(3):
            for name in NAMES:
                fn = lambda: call(name)
                out = fn().float(); err = ((out - ref).norm() / ref.norm()).item()
                for mode in ("tp", "lat"):
                    res.setdefault((name, mode), []).append(timeit(fn, mode))
                res.setdefault((name, "err"), []).append(err)
        med = {k: st.median(v) if k[1] != "err" else max(v) for k, v in res.items()}
        row = dict(M=M, K=K, n=n, act=act, **{f"{k[0]}_{k[1]}": v for k, v in med.items()})
        rows.append(row)
        if r == 0:
            best = {m: min(med[(x, m)] for x in NAMES[:3]) for m in ("tp", "lat")}
            print(f"{M}x{K}->{n} {act:6s} auto/best tp {med[('auto','tp')]/best['tp']:.3f} lat {med[('auto','lat')]/best['lat']:.3f} | /seq tp "
                  + " ".join(f"{x} {med[(x,'tp')]/med[('sequential','tp')]:.3f}" for x in NAMES) + " | lat "
                  + " ".join(f"{x} {med[(x,'lat')]/med[('sequential','lat')]:.3f}" for x in NAMES)
                  + f" | seq ms {med[('sequential','tp')]:.3f} {med[('sequential','lat')]:.3f} | err {max(med[(x,'err')] for x in NAMES):.1e}", flush=True)
if r == 0 and len(sys.argv) > 1:
    json.dump(rows, open(sys.argv[1], "w"), indent=1)
dist.destroy_process_group()
