"""Candidate small-tile configs of the GEMM core against cuBLAS (do_bench, as scripts/bench_gemm.py)."""
import os, sys
sys.path.insert(0, os.getcwd())
import torch, triton
from fluxlite.kernels.ag_gemm import gemm
from fluxlite.kernels.gemm_core import GemmConfig
C = {
    "128x256 w8 s3 (default)": GemmConfig(),
    "64x256 w4 s4": GemmConfig(block_m=64, block_n=256, num_warps=4, num_stages=4),
    "64x128 w4 s4": GemmConfig(block_m=64, block_n=128, num_warps=4, num_stages=4),
    "64x128 w4 s6": GemmConfig(block_m=64, block_n=128, num_warps=4, num_stages=6),
    "128x128 w4 s4": GemmConfig(block_n=128, num_warps=4, num_stages=4),
    "128x64 w4 s4": GemmConfig(block_n=64, num_warps=4, num_stages=4),
    "128x128 w8 s4 g16": GemmConfig(block_n=128, num_stages=4, group_m=16),
}
shapes = [(2000, 5120, 1376), (3000, 4096, 1024), (1024, 8192, 4096), (8192, 2048, 28672), (512, 8192, 8192), (4096, 4096, 2048), (8192, 8192, 5120)]
for M, K, N in shapes:
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16); w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    bench = triton.testing.do_bench_cudagraph if os.environ.get("GRAPH") else (lambda f, **k: triton.testing.do_bench(f, warmup=50, **k))
    tc = bench(lambda: torch.matmul(a, w.t()), rep=300, return_mode="median")
    ref = a.float() @ w.float().t()
    parts = []
    for name, cfg in C.items():
        try:
            out = gemm(a, w, config=cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = bench(lambda: gemm(a, w, config=cfg), rep=300, return_mode="median")
            parts.append(f"{name}: {t / tc:.3f}" + ("" if err < 1e-2 else f" ERR {err:.1e}"))
        except Exception as exc:
            parts.append(f"{name}: FAIL {type(exc).__name__} {str(exc)[:80]}")
    print(f"{M}x{K}->{N}: cuBLAS {tc*1e3:.1f} us; " + "; ".join(parts), flush=True)
