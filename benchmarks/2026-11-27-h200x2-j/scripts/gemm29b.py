"""The Triton GEMM core alone against cuBLAS on one GPU: bench_gemm's shapes, random shapes over 0.5 ms
with N and K off multiples of 128, and, where the best of GPU_CONFIGS is over 1.015x, extra configs."""
import json, random, sys, os
import torch, triton
sys.path.insert(0, os.getcwd())
from fluxlite.kernels.ag_gemm import gemm
from fluxlite.dispatch import GPU_CONFIGS
from fluxlite.kernels.gemm_core import GemmConfig

BASE = [(8192, 8192, 14336), (8192, 14336, 8192), (8192, 8192, 5120), (16384, 8192, 4096), (8192, 5120, 8192),
        (16384, 4096, 8192), (4096, 28672, 4096), (8192, 2048, 28672), (16384, 4096, 28672), (32768, 8192, 7168),
        (6144, 14336, 8192), (8192, 8192, 3584), (4096, 8192, 14336), (8192, 7168, 8192)]
rng = random.Random(2911)
RAND = []
while len(RAND) < 10:
    M = rng.randrange(2048, 16385, 16); K = rng.randrange(1024, 16384, 8); N = rng.randrange(1024, 16384, 8)
    if K % 128 == 0 or N % 128 == 0: continue
    if 2 * M * N * K / 650e12 < 0.55e-3 or 2 * M * N * K / 650e12 > 4e-3: continue
    RAND.append((M, K, N))
EXTRA = [GemmConfig(block_m=256, block_n=128), GemmConfig(block_m=256, block_n=128, num_stages=4),
         GemmConfig(group_m=4), GemmConfig(group_m=32), GemmConfig(num_stages=4, group_m=4),
         GemmConfig(block_m=128, block_n=128, num_warps=4, num_stages=4), GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=5)]
def label(c): return f"{c.block_m}x{c.block_n}x{c.block_k}w{c.num_warps}s{c.num_stages}g{c.group_m}"
def bench(fn): return triton.testing.do_bench(fn, warmup=40, rep=250, return_mode="median")
rows = []
SMALL = [(2000, 5120, 1376), (3000, 4096, 1024), (1024, 8192, 4096), (2048, 8192, 7168), (4096, 4096, 3072), (1000, 4096, 2816)]
for tag, shapes in (("base", BASE), ("rand", RAND), ("small", SMALL)):
    for M, K, N in shapes:
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16); w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
        ref = a.float() @ w.float().t()
        tc = bench(lambda: torch.matmul(a, w.t()))
        row = dict(tag=tag, M=M, K=K, N=N, cublas_ms=tc, cfg={})
        def run(cs):
            for c in cs:
                try:
                    out = gemm(a, w, config=c); err = ((out.float() - ref).norm() / ref.norm()).item()
                    row["cfg"][label(c)] = (bench(lambda: gemm(a, w, config=c)) / tc, err)
                except Exception as e:
                    row["cfg"][label(c)] = (float("nan"), repr(e)[:80])
        run(GPU_CONFIGS)
        best4 = min(v[0] for v in row["cfg"].values())
        tc2 = bench(lambda: torch.matmul(a, w.t())); row["cublas_ms2"] = tc2
        best = min((v[0], k) for k, v in row["cfg"].items())
        row["best4"] = best4
        rows.append(row)
        print(f"{tag} {M}x{K}->{N} cublas {tc:.3f}/{tc2:.3f} ms " + " ".join(f"{k}:{v[0]:.3f}" for k, v in row["cfg"].items())
              + f" | best4 {best4:.3f} best {best[1]} {best[0]:.3f}", flush=True)
        del a, w, ref
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), open(sys.argv[1], "w"), indent=1)
