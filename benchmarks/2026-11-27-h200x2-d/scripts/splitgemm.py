"""One GPU: what cutting GEMM-RS's per-rank GEMM into the matmul consumer's pieces costs, and
cuBLASLt's candidate algorithms for the local pieces (C and D apart), with and without a workspace."""
import ctypes, json, sys, torch
import fluxlite._cublaslt as L

torch.manual_seed(0)
dev = torch.device("cuda")
lt = L._library()
SHAPES = [(4096,14336,4096),(8192,7168,4096),(16384,3072,4096),(4096,14784,8192),(4096,6144,12288),
          (4096,24576,12288),(8192,18432,12288),(8192,6144,12288),(8192,11832,7184),(8192,14336,8192),(16384,4096,8192)]
W = 2

def bench(fn, reps=20, rounds=7):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        for _ in range(reps): fn()
        e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / reps)
    ts.sort(); return ts[len(ts)//2]

def algos(M, N, K, a, w, c, d, ws_bytes):
    """All heuristic results (up to 16) for d = a@w.T + c (C, D apart)."""
    key = (L._DTYPES[a.dtype], M, N, K, a.stride(0), True, w.stride(0), c.stride(0), d.stride(0),
           tuple(map(L._alignment, (w.data_ptr(), a.data_ptr(), c.data_ptr(), d.data_ptr()))))
    handle = L._handles.get(0)
    if handle is None:
        h = L._P(); lt["cublasLtCreate"](ctypes.byref(h)); handle = L._handles[0] = h.value
    desc = L._P(); lt["cublasLtMatmulDescCreate"](ctypes.byref(desc), L._COMPUTE_32F, L._R_32F)
    for attr, value in ((L._DESC_TRANSA, L._OP_T), (L._DESC_TRANSB, L._OP_N)):
        v = L._I32(value); lt["cublasLtMatmulDescSetAttribute"](desc, attr, ctypes.byref(v), 4)
    dt = key[0]
    lays = [L._layout(lt, dt, K, N, K), L._layout(lt, dt, K, M, K), L._layout(lt, dt, N, M, N), L._layout(lt, dt, N, M, N)]
    pref = L._P(); lt["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))
    wsv = L._U64(ws_bytes); lt["cublasLtMatmulPreferenceSetAttribute"](pref, L._PREF_MAX_WORKSPACE, ctypes.byref(wsv), 8)
    res = (L._HeuristicResult * 16)(); cnt = ctypes.c_int(0)
    lt["cublasLtMatmulAlgoGetHeuristic"](handle, desc.value, *lays, pref, 16, res, ctypes.byref(cnt))
    out = []
    for r in res[: cnt.value]:
        if r.state: continue
        cap, wr = L._I32(0), L._SZ(0)
        lt["cublasLtMatmulAlgoCapGetAttribute"](ctypes.byref(r.algo), L._CAP_OUT_OF_PLACE, ctypes.byref(cap), 4, ctypes.byref(wr))
        out.append(((L._U64 * 8)(*r.algo), r.workspace_size, bool(cap.value), r.waves))
    return handle, desc.value, lays, out

def run_algo(handle, desc, lays, algo, a, w, c, d, beta, ws, ws_size):
    al, be = ctypes.c_float(1.0), ctypes.c_float(beta)
    stream = torch.cuda.current_stream().cuda_stream
    def fn():
        rc = lt["cublasLtMatmul"](handle, desc, ctypes.byref(al), w.data_ptr(), lays[0], a.data_ptr(), lays[1], ctypes.byref(be),
                                  c.data_ptr(), lays[2], d.data_ptr(), lays[3], ctypes.byref(algo),
                                  ws.data_ptr() if ws_size else None, ws_size, stream)
        assert rc == 0, rc
    return fn

rows = []
wsbuf = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
for M, Kf, N in SHAPES:
    K = Kf // W
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16); w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    o = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    recv = torch.randn(M // W, N, device=dev, dtype=torch.bfloat16)
    q = M // 4; h = M // 2
    t = {}
    t["matmul"] = bench(lambda: torch.matmul(a, w.t(), out=o))
    t["lt_full"] = bench(lambda: L.linear_into(o, a, w, None))
    t["split4_inplace"] = bench(lambda: [L.linear_into(o[i*q:(i+1)*q], a[i*q:(i+1)*q], w, None) for i in range(4)])
    def mixed():
        for i in range(2): L.linear_into(o[i*q:(i+1)*q], a[i*q:(i+1)*q], w, None)
        for i in range(2): L.addmm_into(o[h+i*q:h+(i+1)*q], recv[i*q:(i+1)*q], a[h+i*q:h+(i+1)*q], w, 1.0)
    t["split4_mixed"] = bench(mixed)
    t["quarter_inplace"] = bench(lambda: L.linear_into(o[:q], a[:q], w, None))
    t["quarter_addmm"] = bench(lambda: L.addmm_into(o[h:h+q], recv[:q], a[h:h+q], w, 1.0))
    t["quarter_matmul_ws"] = bench(lambda: torch.matmul(a[:q], w.t(), out=o[:q]))
    # every candidate for the quarter addmm, without and with a workspace
    cands = []
    for ws_size in (0, 32 << 20):
        handle, desc, lays, found = algos(q, N, K, a[h:h+q], w, recv[:q], o[h:h+q], ws_size)
        for i, (algo, need, oop, waves) in enumerate(found):
            if not oop: continue
            if need > ws_size: continue
            ms = bench(run_algo(handle, desc, lays, algo, a[h:h+q], w, recv[:q], o[h:h+q], 1.0, wsbuf, ws_size))
            cands.append(dict(ws=ws_size, i=i, need=need, waves=round(waves, 3), ms=ms, id=int(algo[0])))
    best = min(c["ms"] for c in cands) if cands else float("nan")
    c0 = next((c["ms"] for c in cands if c["ws"] == 0), float("nan"))
    print(f"{M}x{Kf}->{N} (K_local {K}): matmul {t['matmul']:.3f} ms | lt_full/matmul {t['lt_full']/t['matmul']:.3f} "
          f"split4_inplace {t['split4_inplace']/t['matmul']:.3f} split4_mixed {t['split4_mixed']/t['matmul']:.3f} | "
          f"quarter: inplace {t['quarter_inplace']*1e3:.1f} addmm {t['quarter_addmm']*1e3:.1f} matmul_ws {t['quarter_matmul_ws']*1e3:.1f} us; "
          f"addmm candidates first(ws0) {c0*1e3:.1f} best {best*1e3:.1f} us of {len(cands)}", flush=True)
    for c in sorted(cands, key=lambda c: c["ms"])[:6]:
        print("    ", c)
    rows.append(dict(M=M, K=Kf, N=N, times=t, cands=cands))
json.dump(rows, open(sys.argv[1], "w"), indent=1)
