"""Where a K-off call's padding time goes, on one GPU: cuBLAS on padded / K-extent views, the pad copies
(SM copy kernel vs the copy engine's 2D copy), and a GEMM beside the copy engine's 2D pad."""
import ctypes, sys, torch
from fluxlite._cuda_driver import _driver
from fluxlite._sequential import zero_padded

class M2D(ctypes.Structure):
    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
                ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("srcPitch", ctypes.c_size_t),
                ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int),
                ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                ("dstPitch", ctypes.c_size_t), ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]
lib = ctypes.CDLL("libcuda.so.1")
cp2d = lib.cuMemcpy2DAsync_v2; cp2d.argtypes = [ctypes.POINTER(M2D), ctypes.c_void_p]; cp2d.restype = ctypes.c_int
_driver()

def copy2d(dst, src, stream):
    p = M2D(); p.srcMemoryType = p.dstMemoryType = 2
    p.srcDevice, p.dstDevice = src.data_ptr(), dst.data_ptr()
    p.srcPitch, p.dstPitch = src.stride(0) * src.element_size(), dst.stride(0) * dst.element_size()
    p.WidthInBytes, p.Height = src.shape[1] * src.element_size(), src.shape[0]
    rc = cp2d(ctypes.byref(p), ctypes.c_void_p(stream.cuda_stream)); assert rc == 0, rc

def t(fn, n=20):
    for _ in range(3): fn()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n

torch.manual_seed(0)
side = torch.cuda.Stream()
for (M, K, N) in [(14634, 11037, 1804), (8192, 4099, 3001), (15646, 13227, 6639), (6000, 5001, 2999), (12000, 4100, 6001)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    Kp, Np = K + -K % 64, N + -N % 8
    ap, wp = zero_padded(a, 0, Kp - K), zero_padded(w, Np - N, Kp - K)
    av, wv = ap[:, :K], wp[:N, :K]
    out = torch.empty(M, Np, device="cuda", dtype=torch.bfloat16)
    g_pad = t(lambda: torch.matmul(ap, wp.t(), out=out))
    g_view = t(lambda: torch.matmul(av, wp[:, :K].t(), out=out))  # K extent off, strides whole
    g_raw = t(lambda: torch.matmul(a, w.t()), 5)
    pa_sm = t(lambda: zero_padded(a, 0, Kp - K))
    pa_sm2 = t(lambda: ap[:, :K].copy_(a))
    pa_ce = t(lambda: copy2d(ap, a, torch.cuda.current_stream()))
    pw = t(lambda: zero_padded(w, Np - N, Kp - K))
    crop = t(lambda: out[:M // 2, :N].contiguous())
    ok = torch.equal(ap[:, :K], a)
    def both_ce():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side): copy2d(ap, a, side)
        torch.matmul(ap, wp.t(), out=out)  # racing on ap is fine for timing
        torch.cuda.current_stream().wait_stream(side)
    def both_sm():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side): ap[:, :K].copy_(a)
        torch.matmul(ap, wp.t(), out=out)
        torch.cuda.current_stream().wait_stream(side)
    b_ce, b_sm = t(both_ce), t(both_sm)
    print(f"{M}x{K}->{N}: gemm padded {g_pad:.3f} view(K extent) {g_view:.3f} raw {g_raw:.3f} | pad a: zero_padded {pa_sm:.3f} "
          f"copy_ {pa_sm2:.3f} CE2D {pa_ce:.3f} (ok {ok}) | pad w {pw:.3f} | crop half {crop:.3f} | "
          f"gemm+CE pad concurrently {b_ce:.3f} gemm+SM pad concurrently {b_sm:.3f}", flush=True)
