"""One GPU: an AG-GEMM consumer's work with an activation, without communication. The Triton kernel
(its epilogue applies the activation) against the matmul consumer's (cuBLAS GEMM with the bias, then
the activation as one elementwise pass), each over the whole gathered M; cuBLAS alone for scale."""
import sys, json, torch, triton
from fluxlite.kernels.ag_gemm import gemm
from fluxlite.epilogue import Epilogue
from fluxlite._sequential import epilogue_linear
bench = lambda f: triton.testing.do_bench(f, warmup=30, rep=200, return_mode="median")
shapes = [(8192, 5000, 7000), (16384, 2000, 6672), (3184, 15480, 7464), (6000, 7000, 10000), (8192, 4968, 7832),
          (12000, 3000, 7000), (4096, 3000, 4096), (2048, 7000, 8192),
          (8192, 5056, 7000), (8192, 8192, 7168), (16384, 4096, 7168), (8192, 8192, 14336)]
print(torch.cuda.get_device_name(), flush=True)
res = []
for M, K, N in shapes:
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    for act in ("gelu", "swiglu"):
        rows = 2 * N if act == "swiglu" else N
        w = (torch.randn(rows, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
        b = torch.randn(rows, device="cuda").to(torch.bfloat16)
        ep = Epilogue(act)
        out_t = torch.empty(M, N, device="cuda", dtype=torch.bfloat16); out_m = torch.empty_like(out_t)
        gemm(a, w, b, ep=ep, out=out_t); epilogue_linear(out_m, a, w, b, ep)
        diff = ((out_t.float() - out_m.float()).norm() / out_m.float().norm()).item()
        t = dict(cublas=bench(lambda: torch.matmul(a, w.t())), triton=bench(lambda: gemm(a, w, b, ep=ep, out=out_t)),
                 matmul=bench(lambda: epilogue_linear(out_m, a, w, b, ep)))
        res.append(dict(M=M, K=K, N=N, act=act, diff=diff, **t))
        print(f"{M}x{K}->{N} {act}: cuBLAS {t['cublas']:.3f} ms; triton {t['triton']/t['cublas']:.3f}, "
              f"matmul+pass {t['matmul']/t['cublas']:.3f}; triton/matmul {t['triton']/t['matmul']:.3f} (diff {diff:.1e})", flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), rows=res), open(sys.argv[1], "w"), indent=1)
