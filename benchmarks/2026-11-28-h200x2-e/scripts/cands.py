"""Every no-workspace cuBLASLt candidate (heuristic's top 16) timed at a shape, against torch.matmul.
    python3 benchmarks/2026-11-28-h200x2-e/scripts/cands.py M,K,N ..."""
import sys, ctypes, statistics, torch
from fluxlite import _cublaslt as L
dev = torch.device("cuda")
FOUND, CHOICE = [], [0]
def cands(lt, handle, desc, layouts, aligns):
    pref = L._P(); lt["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))
    ws = L._U64(0); lt["cublasLtMatmulPreferenceSetAttribute"](pref, L._PREF_MAX_WORKSPACE, ctypes.byref(ws), 8)
    for attr, align in zip((L._PREF_ALIGN_A, L._PREF_ALIGN_B, L._PREF_ALIGN_C, L._PREF_ALIGN_D), aligns):
        v = ctypes.c_uint32(align); lt["cublasLtMatmulPreferenceSetAttribute"](pref, attr, ctypes.byref(v), 4)
    res = (L._HeuristicResult * 16)(); n = ctypes.c_int(0)
    lt["cublasLtMatmulAlgoGetHeuristic"](handle, desc, *layouts, pref, 16, res, ctypes.byref(n))
    out = []
    for r in res[: n.value]:
        if r.state or r.workspace_size: continue
        cap, w = L._I32(0), L._SZ(0)
        if L._ok(lt["cublasLtMatmulAlgoCapGetAttribute"](ctypes.byref(r.algo), L._CAP_OUT_OF_PLACE, ctypes.byref(cap), 4, ctypes.byref(w))) and cap.value:
            out.append(((L._U64 * 8)(*r.algo), r.waves))
    FOUND[:] = out
    return [a for a, _ in out]
L._candidates = cands
L._algo = lambda lt, h, d, lay, al, rows_256=False: (lambda c: c[min(CHOICE[0], len(c) - 1)] if c else None)(cands(lt, h, d, lay, al))
def t(fn, reps=20, rounds=7):
    fn(); torch.cuda.synchronize(); res = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
        for _ in range(reps): fn()
        e.record(); e.synchronize(); res.append(s.elapsed_time(e) / reps)
    return statistics.median(res)
for s in sys.argv[1:]:
    M, K, N = map(int, s.split(","))
    a = torch.randn(M, K, device=dev).bfloat16(); w = torch.randn(N, K, device=dev).bfloat16() / K**.5
    out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    base = t(lambda: torch.matmul(a, w.t(), out=out))
    CHOICE[0] = 0; L._plans.clear(); L.linear_into(out, a, w, None)
    n = len(FOUND); row = []
    for i in range(n):
        CHOICE[0] = i; L._plans.clear()
        ms = t(lambda: L.linear_into(out, a, w, None))
        row.append(f"{L._tile(L._library(), FOUND[i][0])}/{FOUND[i][1]:.2f}:{ms/base:.3f}")
    print(f"{s:>18} mm {base:.3f} ms | " + " ".join(row), flush=True)
