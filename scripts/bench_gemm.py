"""fluxlite's Triton GEMM alone against cuBLAS, over the block configurations that ``auto`` measures
(:data:`fluxlite.dispatch.GPU_CONFIGS`), on one GPU.

    python3 scripts/bench_gemm.py --out bench_gemm.json

``triton.testing.do_bench`` median (ms) on random bf16 data; prints TFLOP/s and the ratio to cuBLAS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fluxlite._cli import ArgumentParser  # noqa: E402
from fluxlite.kernels.ag_gemm import gemm  # noqa: E402
from fluxlite.dispatch import GPU_CONFIGS  # noqa: E402
from fluxlite.kernels.gemm_core import GemmConfig  # noqa: E402

# Llama-3-70B's per-rank GEMMs at TP=2, then a wider range (K 2048-28672, N 1024-57344, M 1024-32768
# tokens; small and ragged M, short N).
SHAPES = [(8192, 8192, 14336), (8192, 14336, 8192), (8192, 8192, 5120), (16384, 8192, 4096), (8192, 5120, 8192),
          (16384, 4096, 8192),
          (1024, 8192, 4096), (2000, 5120, 1376), (3000, 4096, 1024), (4096, 28672, 4096), (8192, 2048, 28672),
          (16384, 4096, 28672), (32768, 8192, 7168), (6144, 14336, 8192)]


def label(cfg: GemmConfig) -> str:
    return f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} g{cfg.group_m}"


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        M, K, N = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is M,K,N (three integers), got {text!r}") from None
    return M, K, N


def main() -> None:
    parser = ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=SHAPES, metavar="M,K,N")
    args = parser.parse_args()
    rows = []
    for M, K, N in args.shapes:
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
        flops = 2.0 * M * N * K
        t_cublas = triton.testing.do_bench(lambda: torch.matmul(a, w.t()), warmup=50, rep=300, return_mode="median")
        row = dict(M=M, K=K, N=N, cublas_ms=t_cublas, configs={})
        ref = (a.float() @ w.float().t())
        for name, cfg in ((label(c), c) for c in GPU_CONFIGS):
            try:
                out = gemm(a, w, config=cfg)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                t = triton.testing.do_bench(lambda: gemm(a, w, config=cfg), warmup=50, rep=300, return_mode="median")
                row["configs"][name] = dict(ms=t, ratio=t / t_cublas, tflops=flops / t / 1e9, rel_err=err)
            except Exception as exc:
                row["configs"][name] = dict(error=repr(exc)[:200])
        rows.append(row)
        best = min((v["ratio"], k) for k, v in row["configs"].items() if "ratio" in v)
        print(f"{M}x{K}->{N}: cuBLAS {t_cublas:.3f} ms ({flops / t_cublas / 1e9:.0f} TFLOP/s); "
              + "; ".join(f"{k}: {v['ratio']:.3f}" if "ratio" in v else f"{k}: ERR {v['error'][:60]}" for k, v in row["configs"].items())
              + f"; best {best[1]} {best[0]:.3f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
