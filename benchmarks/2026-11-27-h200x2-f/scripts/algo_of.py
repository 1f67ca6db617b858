"""Experiment (not in the package): the matmul consumer's split GEMMs with the algorithm cuBLASLt's
heuristic gives for a GEMM of FACTOR times their rows (FACTOR=4: the whole [M, K] @ W.T at two ranks
and two splits; 2: the chunk), the 128x256 rule applied to that shape's candidates. Counts GEMMs that
cuBLASLt refused with that algorithm (they fall back to torch)."""
import ctypes, os
import fluxlite._cublaslt as lt

FACTOR = int(os.environ.get("FACTOR", "4"))
REFUSED = [0, 0]


def _plan(L, device, key):
    dtype, M, N, K, lda, w_trans, ldw, ldc, ldd, aligns, rows_256 = key
    handle = lt._handles.get(device)
    if handle is None:
        h = lt._P()
        if not lt._ok(L["cublasLtCreate"](ctypes.byref(h))):
            return None
        handle = lt._handles[device] = h.value
    desc = lt._P()
    if not lt._ok(L["cublasLtMatmulDescCreate"](ctypes.byref(desc), lt._COMPUTE_32F, lt._R_32F)):
        return None
    for attr, value in ((lt._DESC_TRANSA, lt._OP_T if w_trans else lt._OP_N), (lt._DESC_TRANSB, lt._OP_N)):
        v = lt._I32(value)
        L["cublasLtMatmulDescSetAttribute"](desc, attr, ctypes.byref(v), 4)
    wl = lambda: lt._layout(L, dtype, K, N, ldw) if w_trans else lt._layout(L, dtype, N, K, ldw)
    layouts = [wl(), lt._layout(L, dtype, K, M, lda), lt._layout(L, dtype, N, M, ldc), lt._layout(L, dtype, N, M, ldd)]
    big = M * FACTOR if M >= 256 else M
    probe = [wl(), lt._layout(L, dtype, K, big, lda), lt._layout(L, dtype, N, big, ldc), lt._layout(L, dtype, N, big, ldd)]
    algo = lt._algo(L, handle, desc.value, probe, aligns, rows_256) if all(probe) else None
    lt._destroy(L, None, probe)
    if algo is None:
        lt._destroy(L, desc.value, layouts)
        return None
    return (handle, desc.value, *layouts, algo)


def install():
    lt._plan = _plan
    L = lt._library()
    real = L["cublasLtMatmul"]

    def counted(*args):
        rc = real(*args)
        REFUSED[rc != 0] += 1
        return rc
    L["cublasLtMatmul"] = counted
    import atexit
    atexit.register(lambda: print(f"cublasLtMatmul calls ok {REFUSED[0]}, refused {REFUSED[1]}", flush=True))
