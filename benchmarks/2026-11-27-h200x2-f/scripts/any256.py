"""Experiment (not in the package): of the heuristic's first eight no-workspace candidates, the first
with the 128x256 tile where there is one (rows_256 GEMMs only), else the heuristic's first."""
import ctypes
import fluxlite._cublaslt as lt

_orig = lt._candidates


def _candidates8(L, handle, desc, layouts, aligns):
    pref = lt._P()
    if not lt._ok(L["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))):
        return []
    try:
        ws = lt._U64(0)
        L["cublasLtMatmulPreferenceSetAttribute"](pref, lt._PREF_MAX_WORKSPACE, ctypes.byref(ws), 8)
        for attr, align in zip((lt._PREF_ALIGN_A, lt._PREF_ALIGN_B, lt._PREF_ALIGN_C, lt._PREF_ALIGN_D), aligns):
            v = ctypes.c_uint32(align)
            L["cublasLtMatmulPreferenceSetAttribute"](pref, attr, ctypes.byref(v), 4)
        results = (lt._HeuristicResult * 16)()
        count = ctypes.c_int(0)
        if not lt._ok(L["cublasLtMatmulAlgoGetHeuristic"](handle, desc, *layouts, pref, 16, results, ctypes.byref(count))):
            return []
    finally:
        L["cublasLtMatmulPreferenceDestroy"](pref)
    algos = []
    for r in results[: count.value]:
        if r.state != 0 or r.workspace_size:
            continue
        cap, written = lt._I32(0), lt._SZ(0)
        if lt._ok(L["cublasLtMatmulAlgoCapGetAttribute"](ctypes.byref(r.algo), lt._CAP_OUT_OF_PLACE, ctypes.byref(cap), 4,
                                                          ctypes.byref(written))) and cap.value:
            algos.append((lt._U64 * 8)(*r.algo))
            if len(algos) == 8:
                break
    return algos


def install():
    lt._candidates = _candidates8
    lt.preferred = lambda tiles: tiles.index(lt._TILE_128x256) if lt._TILE_128x256 in tiles else 0
