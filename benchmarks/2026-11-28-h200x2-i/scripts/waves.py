"""Cut GEMMs and waves: cuBLASLt (fluxlite's no-workspace linear_into) at M rows whole, cut in
halves, and cut at m1 chosen to fill whole waves; heuristic waves for each. One GPU."""
import ctypes, sys, statistics, math
import torch
from fluxlite import _cublaslt as L

def waves_of(M, N, K, dtype=torch.bfloat16):
    """(tile, waves) of the heuristic's first no-workspace candidate for x[M,K] @ w[N,K].T."""
    lt = L._library(); dev = torch.cuda.current_device()
    x = torch.empty(M, K, device="cuda", dtype=dtype); w = torch.empty(N, K, device="cuda", dtype=dtype)
    d = torch.empty(M, N, device="cuda", dtype=dtype)
    L.linear_into(d, x, w, None)  # makes the handle
    handle = L._handles[dev]
    desc = L._P(); lt["cublasLtMatmulDescCreate"](ctypes.byref(desc), L._COMPUTE_32F, L._R_32F)
    for attr, value in ((L._DESC_TRANSA, L._OP_T), (L._DESC_TRANSB, L._OP_N)):
        v = L._I32(value); lt["cublasLtMatmulDescSetAttribute"](desc, attr, ctypes.byref(v), 4)
    dt = L._DTYPES[dtype]
    layouts = [L._layout(lt, dt, K, N, K), L._layout(lt, dt, K, M, K), L._layout(lt, dt, N, M, N), L._layout(lt, dt, N, M, N)]
    pref = L._P(); lt["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))
    ws = L._U64(0); lt["cublasLtMatmulPreferenceSetAttribute"](pref, L._PREF_MAX_WORKSPACE, ctypes.byref(ws), 8)
    for attr in (L._PREF_ALIGN_A, L._PREF_ALIGN_B, L._PREF_ALIGN_C, L._PREF_ALIGN_D):
        v = ctypes.c_uint32(256); lt["cublasLtMatmulPreferenceSetAttribute"](pref, attr, ctypes.byref(v), 4)
    res = (L._HeuristicResult * 8)(); cnt = ctypes.c_int(0)
    lt["cublasLtMatmulAlgoGetHeuristic"](handle, desc, *layouts, pref, 8, res, ctypes.byref(cnt))
    for r in res[: cnt.value]:
        if r.state == 0 and r.workspace_size == 0:
            return L._tile(lt, r.algo), r.waves
    return None, None

def timed(fns, reps=20, rounds=7):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(rounds):
        torch.cuda._sleep(2_000_000)
        s.record()
        for _ in range(reps):
            for f in fns: f()
        e.record(); e.synchronize(); out.append(s.elapsed_time(e) * 1000 / reps)
    return statistics.median(out)

def shape(M, K, N, cuts):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    whole = timed([lambda: L.linear_into(d, x, w, None)])
    tw = waves_of(M, N, K)
    print(f"{M}x{K}->{N}: whole {whole:8.1f} us  tile {tw[0]} waves {tw[1]:.2f}", flush=True)
    for m1 in cuts:
        f1 = lambda m1=m1: L.linear_into(d[:m1], x[:m1], w, None)
        f2 = lambda m1=m1: L.linear_into(d[m1:], x[m1:], w, None)
        t = timed([f1, f2]); a, b = waves_of(m1, N, K), waves_of(M - m1, N, K)
        print(f"   cut {m1:5d}+{M-m1:5d}: {t:8.1f} us = {t/whole:.3f} whole; waves {a[1]:.2f}+{b[1]:.2f} tiles {a[0]},{b[0]}", flush=True)

torch.manual_seed(0)
for M, K, N, cuts in [
    (8192, 5000, 3500, [4096, 3584, 3072, 2560]),
    (6144, 3000, 4500, [3072, 2688, 2304]),
    (4096, 8192, 7392, [2048, 1792, 1536]),
    (4096, 4096, 7168, [2048, 1536, 1024]),
    (4096, 8192, 5120, [2048, 1536, 1024]),
    (8192, 8192, 28672, [4096, 3968, 3840]),
    (4096, 4096, 3072, [2048, 1408, 1280]),
    (8192, 8192, 14336, [4096, 3840]),
    (12000, 8192, 2752, [6000, 5632]),
    (8192, 28672, 4096, [4096, 3584]),
]:
    shape(M, K, N, cuts)
