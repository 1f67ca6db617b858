"""One GPU: four split GEMMs d = a @ W.T + c in one CUDA graph (the matmul consumer's local pattern),
by torch.addmm (copies c into d), cuBLASLt with 32 MiB workspace (memset node per GEMM?), cuBLASLt
with no workspace. Prints us per graph replay. PYTHONPATH=$PWD python benchmarks/2026-11-26-h200x2-k/scripts/lt_ws.py"""
import torch, fluxlite._cublaslt as C

def bench(fn, reps=50):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph(); g.capture_begin(); fn(); g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(5): g.replay()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(reps): g.replay()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps * 1e3

for rows, K, N in ((2048, 4096, 8192), (2048, 7168, 4096), (1024, 14336, 8192), (4096, 5120, 8192)):
    a = [torch.randn(rows, K, device="cuda").bfloat16() for _ in range(4)]
    w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
    c = [torch.randn(rows, N, device="cuda").bfloat16() for _ in range(4)]
    d = [torch.empty(rows, N, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    res = {}
    res["addmm"] = bench(lambda: [torch.addmm(c[i], a[i], w.t(), out=d[i]) for i in range(4)])
    res["addmm_beta0"] = bench(lambda: [d[i].addmm_(a[i], w.t(), beta=0) for i in range(4)])
    res["lt32"] = bench(lambda: [C.addmm_into(d[i], c[i], a[i], w, 1.0) for i in range(4)])
    dev = torch.cuda.current_device()
    keep = C._workspaces.get(dev)
    C._workspaces[dev] = torch.empty(0, dtype=torch.uint8, device="cuda")
    ok = C.addmm_into(d[0], c[0], a[0], w, 1.0)
    res["lt0"] = bench(lambda: [C.addmm_into(d[i], c[i], a[i], w, 1.0) for i in range(4)]) if ok else float("nan")
    C._workspaces[dev] = keep
    print(f"{rows}x{K}->{N} x4, us per graph: " + " ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
