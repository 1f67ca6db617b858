"""One cuBLASLt call: ``D = alpha * A @ W.T (+ C) (+ bias)`` with ``C`` and ``D`` in different buffers,
and no workspace.

``torch.addmm(c, a, w.t(), out=d)`` cannot do this: cuBLAS's GEMM reads ``C`` from the buffer it
writes, so torch first copies ``c`` into ``d`` (a pass over ``[M, N]`` before every GEMM). cuBLASLt
takes ``C`` and ``D`` as two pointers. The matmul consumer of GEMM-RS
(:meth:`fluxlite.ops.gemm_rs.GemmReduceScatter._consume_by_matmul`) adds a peer's partial, which
sits in the symmetric receive buffer, to this rank's product and writes the sum into the caller's
output: with this call that is one GEMM with no copy beside it.

No workspace is offered. With one, the heuristic's Hopper kernels schedule their tiles dynamically
and cuBLAS clears the scheduler's counters with a memset before every GEMM: a node of its own in
each fused call's graph, and a gap between two GEMMs. Without one they schedule statically, as fast
on the matmul consumers' GEMMs (BENCHMARKS.md, "cuBLASLt without a workspace"), with nothing before
the GEMM. :func:`linear_into` (no ``C``: ``beta = 0``) is every matmul consumer's GEMM; a bias rides
on cuBLASLt's epilogue there too, where torch's ``addmm`` would take a GEMM with a workspace (on two
H200s fused calls with a bias took 0.94-1.00x the time they took that way at seven AG-GEMM and
GEMM-RS shapes; BENCHMARKS.md, "The bias in cuBLASLt's epilogue").

Of the heuristic's candidates the first is taken. A caller may ask for ``rows_256``: then, where
the heuristic's first two are one kernel's 256x128 and 128x256 tiles (in cuBLASLt's column-major
terms: 256 or 128 output columns of ours by 128 or 256 rows), the second (:func:`preferred`).
GEMM-RS's matmul consumer asks for it (and GEMM-AllReduce's, the same code): in its GEMMs, one
after another beside the copy engine, the 128x256 tile made the call 0.7-6.6% faster in throughput
mode at 6 of 10 shapes that offered the pair on two H200s and as fast at 3 (within the spread in
latency mode); where the pair was other tiles, the second was faster at one shape and 4-14% slower
at two, so those keep the first (BENCHMARKS.md, "The 128x256 tile rule on the GPU"); taking the
128x256 tile wherever the heuristic offers it was 2-4% slower where that changed the choice, and
taking the algorithm the heuristic gives the whole unsplit GEMM up to 1.27x slower. AG-GEMM's
consumer ran the same with the rule and takes the first. Timing the candidates, alone or on a call's
operands, chose worse than the heuristic in the consumer's sequence (up to 1.35x), so no choice
here is timed.

Row-major operands map onto cuBLASLt's column-major ones as transposes::

    d[m, n] = alpha * sum_k a[m, k] * w[n, k] + c[m, n]
    column-major:  D^T (N x M) = op(W) (N x K) @ A^T (K x M) + C^T

``a`` must have unit stride along K, ``c`` and ``d`` unit stride along N, and ``w`` unit stride
along either dimension (``nn.Linear``'s ``[N, K]``, or a backward's ``W.t()`` view of ``[K, N]``).
:func:`addmm_into` returns ``False`` (and does nothing) for anything else, or where no cuBLASLt is
loaded, so that the caller can fall back to torch. Handles, descriptors and the chosen algorithm are
cached per shape, strides, dtype, pointer alignment, ``rows_256`` and whether a bias is added (its
pointer is set on the plan's descriptor at each call).
"""

from __future__ import annotations

import ctypes
import threading
from functools import lru_cache

import torch

from ._sequential import linear_into as torch_linear_into

_P, _I32, _U64, _SZ = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t
_COMPUTE_32F = 68  # CUBLAS_COMPUTE_32F
_R_32F, _DTYPES = 0, {torch.float16: 2, torch.bfloat16: 14}  # cudaDataType
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8  # cublasLtMatmulDescAttributes_t
_EPILOGUE_BIAS = 4  # cublasLtEpilogue_t: D = alpha * A @ B + beta * C + bias, the bias over D's rows (our N)
_PREF_MAX_WORKSPACE, _PREF_ALIGN_A, _PREF_ALIGN_B, _PREF_ALIGN_C, _PREF_ALIGN_D = 1, 5, 6, 7, 8
_CAP_OUT_OF_PLACE = 4  # CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT
_CONFIG_TILE_ID = 1  # CUBLASLT_ALGO_CONFIG_TILE_ID (uint32)
_TILE_128x256, _TILE_256x128 = 23, 24  # cublasLtMatmulTile_t
_OP_N, _OP_T = 0, 1


class _HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", _U64 * 8), ("workspace_size", _SZ), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_SIGNATURES = {
    "cublasLtCreate": [ctypes.POINTER(_P)],
    "cublasLtMatmulDescCreate": [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_int],
    "cublasLtMatmulDescSetAttribute": [_P, ctypes.c_int, _P, _SZ],
    "cublasLtMatrixLayoutCreate": [ctypes.POINTER(_P), ctypes.c_int, _U64, _U64, ctypes.c_int64],
    "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(_P)],
    "cublasLtMatmulPreferenceSetAttribute": [_P, ctypes.c_int, _P, _SZ],
    "cublasLtMatmulAlgoGetHeuristic": [_P, _P, _P, _P, _P, _P, _P, ctypes.c_int,
                                       ctypes.POINTER(_HeuristicResult), ctypes.POINTER(ctypes.c_int)],
    "cublasLtMatmulAlgoCapGetAttribute": [_P, ctypes.c_int, _P, _SZ, ctypes.POINTER(_SZ)],
    "cublasLtMatmul": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SZ, _P],
    "cublasLtMatmulDescDestroy": [_P],
    "cublasLtMatrixLayoutDestroy": [_P],
    "cublasLtMatmulPreferenceDestroy": [_P],
}
MAX_PLANS = 4096
"""Plans kept (one per shape, layout and alignment); past this they are destroyed and made again."""


@lru_cache(maxsize=1)
def _library() -> dict | None:
    """cuBLASLt's entry points, from the copy torch loaded (or ``None``: no CUDA torch, no cuBLASLt)."""
    if not torch.cuda.is_available():
        return None
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libcublasLt.so" in line})
    except OSError:
        pass
    for name in (*paths, "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        fns = {}
        for fn_name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, fn_name, None)
            if fn is None:
                return None  # a cuBLASLt without one of these: torch.addmm it is
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            fns[fn_name] = fn
        config = getattr(lib, "cublasLtMatmulAlgoConfigGetAttribute", None)  # optional: tiles read for preferred()
        if config is not None:
            config.argtypes, config.restype = [_P, ctypes.c_int, _P, _SZ, ctypes.POINTER(_SZ)], ctypes.c_int
            fns["cublasLtMatmulAlgoConfigGetAttribute"] = config
        return fns
    return None


_lock = threading.Lock()
_handles: dict[int, int] = {}
_plans: dict[tuple, tuple | None] = {}


def _ok(rc: int) -> bool:
    return rc == 0


def _alignment(address: int) -> int:
    """The largest power of two up to 256 that divides ``address`` (cuBLASLt assumes 256 unless told)."""
    return min(256, address & -address) if address else 256


def _layout(lt: dict, dtype: int, rows: int, cols: int, ld: int) -> int | None:
    layout = _P()
    return layout.value if _ok(lt["cublasLtMatrixLayoutCreate"](ctypes.byref(layout), dtype, rows, cols, ld)) else None


def _destroy(lt: dict, desc: int | None, layouts: list) -> None:
    if desc:
        lt["cublasLtMatmulDescDestroy"](desc)
    for layout in layouts:
        if layout:
            lt["cublasLtMatrixLayoutDestroy"](layout)


def _plan(lt: dict, device: int, key: tuple) -> tuple | None:
    """``(handle, desc, A, B, C, D layouts, algo)`` for one key, or ``None`` where cuBLASLt has no
    out-of-place algorithm for it."""
    dtype, M, N, K, lda, w_trans, ldw, ldc, ldd, aligns, rows_256, biased = key
    handle = _handles.get(device)
    if handle is None:
        h = _P()
        if not _ok(lt["cublasLtCreate"](ctypes.byref(h))):
            return None
        handle = _handles[device] = h.value
    desc = _P()
    if not _ok(lt["cublasLtMatmulDescCreate"](ctypes.byref(desc), _COMPUTE_32F, _R_32F)):
        return None
    attrs = [(_DESC_TRANSA, _OP_T if w_trans else _OP_N), (_DESC_TRANSB, _OP_N)]
    if biased:  # the heuristic then offers only algorithms whose epilogue adds it
        attrs.append((_DESC_EPILOGUE, _EPILOGUE_BIAS))
    for attr, value in attrs:
        v = _I32(value)
        lt["cublasLtMatmulDescSetAttribute"](desc, attr, ctypes.byref(v), 4)
    # op(A) is N x K: W^T stored K x N (ld = ldw) for nn.Linear's [N, K], or W stored N x K otherwise
    layouts = [_layout(lt, dtype, K, N, ldw) if w_trans else _layout(lt, dtype, N, K, ldw),
               _layout(lt, dtype, K, M, lda), _layout(lt, dtype, N, M, ldc), _layout(lt, dtype, N, M, ldd)]
    algo = _algo(lt, handle, desc.value, layouts, aligns, rows_256) if all(layouts) else None
    if algo is None:
        _destroy(lt, desc.value, layouts)
        return None
    return (handle, desc.value, *layouts, algo)


def preferred(tiles: list) -> int:
    """Which of the heuristic's candidates to take, given each one's tile (``cublasLtMatmulTile_t``,
    or ``None`` where it could not be read), in the heuristic's order: the second where the first two
    are the 256x128 tile, then the 128x256 tile; else the first (module docstring)."""
    return 1 if tiles[:2] == [_TILE_256x128, _TILE_128x256] else 0


def _tile(lt: dict, algo) -> int | None:
    """``algo``'s tile (``cublasLtMatmulTile_t``), or ``None`` where this cuBLASLt cannot say."""
    read = lt.get("cublasLtMatmulAlgoConfigGetAttribute")
    if read is None:
        return None
    tile, written = ctypes.c_uint32(0), _SZ(0)
    if not _ok(read(ctypes.byref(algo), _CONFIG_TILE_ID, ctypes.byref(tile), 4, ctypes.byref(written))):
        return None
    return tile.value


def _algo(lt: dict, handle: int, desc: int, layouts: list, aligns: tuple, rows_256: bool = False):
    """The heuristic's first out-of-place algorithm that needs no workspace (``rows_256``: its first
    or its second, :func:`preferred`), or ``None``."""
    algos = _candidates(lt, handle, desc, layouts, aligns)
    if not algos:
        return None
    return algos[preferred([_tile(lt, algo) for algo in algos])] if rows_256 else algos[0]


def _candidates(lt: dict, handle: int, desc: int, layouts: list, aligns: tuple) -> list:
    """The heuristic's first two out-of-place algorithms that need no workspace (fewer where it has
    fewer), in its order."""
    pref = _P()
    if not _ok(lt["cublasLtMatmulPreferenceCreate"](ctypes.byref(pref))):
        return []
    try:
        ws = _U64(0)
        lt["cublasLtMatmulPreferenceSetAttribute"](pref, _PREF_MAX_WORKSPACE, ctypes.byref(ws), 8)
        for attr, align in zip((_PREF_ALIGN_A, _PREF_ALIGN_B, _PREF_ALIGN_C, _PREF_ALIGN_D), aligns):
            v = ctypes.c_uint32(align)
            lt["cublasLtMatmulPreferenceSetAttribute"](pref, attr, ctypes.byref(v), 4)
        results = (_HeuristicResult * 8)()
        count = ctypes.c_int(0)
        if not _ok(lt["cublasLtMatmulAlgoGetHeuristic"](handle, desc, *layouts, pref, 8, results, ctypes.byref(count))):
            return []
    finally:
        lt["cublasLtMatmulPreferenceDestroy"](pref)
    algos = []
    for result in results[: count.value]:
        if result.state != 0 or result.workspace_size:
            continue
        cap, written = _I32(0), _SZ(0)
        if _ok(lt["cublasLtMatmulAlgoCapGetAttribute"](ctypes.byref(result.algo), _CAP_OUT_OF_PLACE, ctypes.byref(cap),
                                                        4, ctypes.byref(written))) and cap.value:
            algos.append((_U64 * 8)(*result.algo))
            if len(algos) == 2:
                break
    return algos


def addmm_into(d: torch.Tensor, c: torch.Tensor | None, a: torch.Tensor, w: torch.Tensor, alpha: float,
               rows_256: bool = False, bias: torch.Tensor | None = None) -> bool:
    """``d = alpha * a @ w.T + c + bias`` (``c`` ``None``: no ``c``; ``bias`` ``None``: no bias) on the
    current stream, ``c`` left as it is; ``False`` (nothing enqueued) where this call does not apply
    (module docstring; a bias must be contiguous, of ``a``'s dtype and start on 256 bytes, as a tensor
    of its own does: the alignment the GPU tests ran, where cuBLASLt is told none). ``rows_256``:
    the 128x256 tile where the heuristic ranks it second behind 256x128 (module docstring). The bias
    rides on cuBLASLt's epilogue (``CUBLASLT_EPILOGUE_BIAS``), as torch's ``addmm`` adds it, with no
    workspace.

    Shapes: ``a: [M, K]``, ``w: [N, K]``, ``c, d: [M, N]``, ``bias: [N]``, all of one dtype
    (fp16/bf16), on one GPU.
    """
    if a.dtype not in _DTYPES or not a.is_cuda or not (a.dtype == w.dtype == d.dtype):
        return False
    if bias is not None and (bias.dtype != a.dtype or bias.shape != (w.shape[0],) or bias.stride(0) != 1
                             or bias.data_ptr() % 256 or bias.device != a.device):
        return False
    beta = 1.0
    if c is None:
        c, beta = d, 0.0  # beta 0: cuBLASLt does not read C
    elif c.dtype != a.dtype:
        return False
    M, K = a.shape
    N = w.shape[0]
    if M == 0 or N == 0 or K == 0 or c.shape != (M, N) or d.shape != (M, N):
        return False
    if a.stride(1) != 1 or c.stride(1) != 1 or d.stride(1) != 1:
        return False
    lda, ldc, ldd = (t.stride(0) if M > 1 else n for t, n in ((a, K), (c, N), (d, N)))
    if lda < K or ldc < N or ldd < N:
        return False
    if w.stride(1) == 1 and (N == 1 or w.stride(0) >= K):  # nn.Linear's [N, K]
        w_trans, ldw = True, w.stride(0) if N > 1 else K
    elif w.stride(0) == 1 and (K == 1 or w.stride(1) >= N):  # a W.t() view of a [K, N] tensor
        w_trans, ldw = False, w.stride(1) if K > 1 else N
    else:
        return False
    lt = _library()
    if lt is None:
        return False
    ptrs = (w.data_ptr(), a.data_ptr(), c.data_ptr(), d.data_ptr())
    device = a.device.index
    key = (_DTYPES[a.dtype], M, N, K, lda, w_trans, ldw, ldc, ldd, tuple(map(_alignment, ptrs)), rows_256,
           bias is not None)
    alpha_, beta_ = ctypes.c_float(alpha), ctypes.c_float(beta)
    with _lock:  # the plans, and a plan's shared descriptor, whose bias pointer is set and read in one step
        plan = _plans.get((device, key), False)
        if plan is False:
            if len(_plans) >= MAX_PLANS:
                for old in _plans.values():
                    if old is not None:
                        _destroy(lt, old[1], list(old[2:6]))
                _plans.clear()
            with torch.cuda.device(device):  # the handle and the heuristic are the device's
                plan = _plans[(device, key)] = _plan(lt, device, key)
        if plan is None:
            return False
        handle, desc, a_layout, b_layout, c_layout, d_layout, algo = plan
        if bias is not None:
            pointer = _P(bias.data_ptr())
            lt["cublasLtMatmulDescSetAttribute"](desc, _DESC_BIAS_POINTER, ctypes.byref(pointer), ctypes.sizeof(pointer))
        rc = lt["cublasLtMatmul"](handle, desc, ctypes.byref(alpha_), ptrs[0], a_layout, ptrs[1], b_layout,
                                  ctypes.byref(beta_), ptrs[2], c_layout, ptrs[3], d_layout, ctypes.byref(algo),
                                  None, 0, torch._C._cuda_getCurrentRawStream(device))
    return _ok(rc)


def linear_into(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                alpha: float = 1.0, rows_256: bool = False) -> torch.Tensor:
    """``out = alpha * x @ weight.T (+ bias)``: the matmul consumers' GEMM. One cuBLASLt call without a
    workspace, the bias in its epilogue, where :func:`addmm_into` applies; else torch's
    (:func:`fluxlite._sequential.linear_into`, the bias in cuBLAS's epilogue).

    Shapes: ``x: [M, K]``, ``weight: [N, K]``, ``bias: [N]``, ``out: [M, N]``."""
    if addmm_into(out, None, x, weight, alpha, rows_256, bias):
        return out
    return torch_linear_into(out, x, weight, bias, alpha)
