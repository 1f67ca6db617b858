"""cuBLASLt algorithms for GEMM-RS's split GEMMs: time, workspace and memsets per heuristic result.
python lt_algos.py  (one GPU)"""
import ctypes, sys, torch
from fluxlite import _cublaslt as L

torch.manual_seed(0)
dev = 0
lt = L._library()
SHAPES = [(2048, 4096, 8192), (2048, 7168, 4096), (4096, 4096, 8192), (1024, 14336, 8192), (2048, 6144, 12288), (3072, 6976, 5184)]


def events_ms(fn, iters=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


def kernels(fn):
    from torch.profiler import profile, ProfilerActivity
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize()
    names = [e.name for e in p.events() if e.device_type.name == "CUDA"]
    return [n[:60] for n in names]


def algos(M, N, K, ws_bytes, a, w, c, d):
    lda, ldc, ldd = K, N, N
    ptrs = (w.data_ptr(), a.data_ptr(), c.data_ptr(), d.data_ptr())
    key = (L._DTYPES[a.dtype], M, N, K, lda, True, K, ldc, ldd, tuple(map(L._alignment, ptrs)), ws_bytes)
    handle = L._plan(lt, dev, key)[0]
    desc = L._P(); lt["cublasLtMatmulDescCreate"](ctypes.byref(desc), L._COMPUTE_32F, L._R_32F)
    for attr, value in ((L._DESC_TRANSA, L._OP_T), (L._DESC_TRANSB, L._OP_N)):
        v = L._I32(value); lt["cublasLtMatmulDescSetAttribute"](desc, attr, ctypes.byref(v), 4)
    dt = L._DTYPES[a.dtype]
    layouts = [L._layout(lt, dt, K, N, K), L._layout(lt, dt, K, M, K), L._layout(lt, dt, N, M, N), L._layout(lt, dt, N, M, N)]
    pref = L._P(); lt["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))
    wsv = L._U64(ws_bytes); lt["cublasLtMatmulPreferenceSetAttribute"](pref, L._PREF_MAX_WORKSPACE, ctypes.byref(wsv), 8)
    res = (L._HeuristicResult * 8)(); cnt = ctypes.c_int(0)
    lt["cublasLtMatmulAlgoGetHeuristic"](handle, desc.value, *layouts, pref.value, 8, res, ctypes.byref(cnt))
    wsbuf = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    out = []
    for i, r in enumerate(res[: cnt.value]):
        if r.state != 0:
            continue
        algo = (L._U64 * 8)(*r.algo)
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(1.0)

        def call(algo=algo, wsz=r.workspace_size):
            rc = lt["cublasLtMatmul"](handle, desc.value, ctypes.byref(alpha), ptrs[0], layouts[0], ptrs[1], layouts[1],
                                      ctypes.byref(beta), ptrs[2], layouts[2], ptrs[3], layouts[3], ctypes.byref(algo),
                                      wsbuf.data_ptr() if wsz else None, wsz, torch.cuda.current_stream().cuda_stream)
            assert rc == 0, rc
        ms = events_ms(call)
        ks = kernels(call)
        ref = (a.float() @ w.float().t() + c.float())
        err = ((d.float() - ref).abs().max() / ref.abs().max()).item()
        out.append((i, r.workspace_size, ms, r.waves, ks, err))
    return out


for M, K, N in SHAPES:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    tf = events_ms(lambda: torch.matmul(a, w.t(), out=d))
    print(f"\n== {M}x{K}->{N}: torch.matmul(out=) {tf*1000:.1f} us kernels {kernels(lambda: torch.matmul(a, w.t(), out=d))}")
    ta = events_ms(lambda: L.addmm_into(d, c, a, w, 1.0))
    print(f"   addmm_into (as shipped) {ta*1000:.1f} us kernels {kernels(lambda: L.addmm_into(d, c, a, w, 1.0))}")
    for ws in (L.WORKSPACE_BYTES, 0):
        for i, wsz, ms, waves, ks, err in algos(M, N, K, ws, a, w, c, d):
            print(f"   pref ws {ws>>20} MiB #{i}: ws {wsz>>10} KiB {ms*1000:.1f} us waves {waves:.2f} err {err:.1e} kernels {ks}")
