"""The GEMM-RS matmul consumer's GEMMs at TP=2 (two chunks of M/2 rows, two splits each: peer chunk
by linear_into, local chunk by addmm_into with C) against one cuBLAS GEMM of the whole shape, with the
128x256 rule and with the heuristic's first; one GPU. Prints ratios; JSON to argv[1]."""
import json, sys, torch
from fluxlite import _cublaslt as lt
from fluxlite.profile.presets import model_shapes

def med(fn, reps=15):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize(); ts.append(e0.elapsed_time(e1))
    ts.sort(); return ts[len(ts) // 2]

shapes = set()
for model in ("llama3-8b", "llama3-70b", "qwen2.5-72b", "gpt3-175b"):
    for tokens in (4096, 8192, 16384):
        for s in model_shapes(model, 2, tokens):
            if s.op in ("gemm_rs", "gemm_ar"):
                shapes.add((s.M, s.K, s.N))
shapes |= {(8192, 4968, 7832), (6144, 9136, 10560), (10000, 7000, 3000), (12000, 3000, 7000)}
res = []
print(torch.cuda.get_device_name(), flush=True)
for M, K, N in sorted(shapes):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    mc = M // 2; h = mc // 2
    partial = torch.empty(mc, N, device="cuda", dtype=torch.bfloat16); recv = torch.randn(mc, N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(mc, N, device="cuda", dtype=torch.bfloat16)
    def consumer(rule):
        def f():
            for lo, hi in ((0, h), (h, mc)):
                lt.linear_into(partial[lo:hi], a[mc + lo: mc + hi], w, None, 1.0, rows_256=rule)
            for lo, hi in ((0, h), (h, mc)):
                assert lt.addmm_into(out[lo:hi], recv[lo:hi], a[lo:hi], w, 1.0, rows_256=rule)
        return f
    full = med(lambda: torch.matmul(a, w.t()))
    t_rule, t_first = med(consumer(True)), med(consumer(False))
    row = dict(M=M, K=K, N=N, full_ms=full, rule_ms=t_rule, first_ms=t_first)
    res.append(row)
    print(f"{M}x{K}->{N}: cuBLAS {full:.3f} ms; consumer rule {t_rule/full:.3f}x, first {t_first/full:.3f}x", flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
