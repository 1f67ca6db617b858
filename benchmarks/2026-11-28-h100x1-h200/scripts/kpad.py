"""Triton core at K off 64: unpadded, and on operands padded to K a multiple of 64 (zeros), with the
pad copies timed apart; cuBLAS alike. One GPU."""
import sys, json, torch, triton
from fluxlite.kernels.ag_gemm import gemm
bench = lambda f: triton.testing.do_bench(f, warmup=30, rep=200, return_mode="median")
shapes = [(8192, 5000, 7000), (10000, 7000, 3000), (6000, 7000, 10000), (8192, 4968, 7832), (3184, 15480, 14920),
          (16352, 13816, 2144), (8192, 5056, 7000), (8192, 5120, 7000), (4096, 3000, 4096), (2048, 7000, 8192)]
print(torch.cuda.get_device_name(), flush=True)
res = []
for M, K, N in shapes:
    Kp = -(-K // 64) * 64
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16); w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    ap = torch.zeros(M, Kp, device="cuda", dtype=torch.bfloat16); wp = torch.zeros(N, Kp, device="cuda", dtype=torch.bfloat16)
    ap[:, :K] = a; wp[:, :K] = w
    ref = a.float() @ w.float().t()
    err = ((gemm(ap, wp).float() - ref).norm() / ref.norm()).item()
    t = dict(cublas=bench(lambda: torch.matmul(a, w.t())), triton=bench(lambda: gemm(a, w)),
             triton_padded=bench(lambda: gemm(ap, wp)), cublas_padded=bench(lambda: torch.matmul(ap, wp.t())),
             pad_a=bench(lambda: ap[:, :K].copy_(a)), pad_w=bench(lambda: wp[:, :K].copy_(w)))
    res.append(dict(M=M, K=K, N=N, err=err, **t))
    c = t["cublas"]
    print(f"{M}x{K}->{N}: cuBLAS {c:.3f} ms; triton {t['triton']/c:.3f}; padded {t['triton_padded']/c:.3f} "
          f"(+pad A {t['pad_a']/c:.3f}, W {t['pad_w']/c:.3f}); cuBLAS padded {t['cublas_padded']/c:.3f}; err {err:.1e}", flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
