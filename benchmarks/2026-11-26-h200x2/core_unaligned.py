"""Experiment: the GEMM core on unaligned / small-M shapes vs cuBLAS; padded-to-aligned twins; configs.
Run one process per GPU: python core_unaligned.py PART NPARTS OUT"""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch, triton
from fluxlite.kernels.ag_gemm import gemm
from fluxlite.kernels.gemm_core import GemmConfig

SHAPES = [(6000, 5000, 7000), (6000, 7000, 5000), (2048, 8192, 7168), (3000, 4000, 6000), (4100, 6000, 3500),
          (8000, 3000, 9000), (6144, 5000, 3500), (1500, 8192, 11000), (7000, 4500, 7000), (1024, 8192, 14336),
          (8192, 8200, 5000), (8192, 8192, 5120), (4096, 5000, 14000), (12000, 3000, 3000), (3000, 5000, 3500), (6000, 4000, 3500)]
V = {"s3g8": GemmConfig(), "s4g8": GemmConfig(num_stages=4), "s4g16": GemmConfig(num_stages=4, group_m=16),
     "n128w4s4": GemmConfig(block_n=128, num_warps=4, num_stages=4), "m256n128": GemmConfig(block_m=256, block_n=128),
     "k128s2": GemmConfig(block_k=128, num_stages=2), "n128w8s4": GemmConfig(block_n=128, num_stages=4)}
part, nparts, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.cuda.set_device(part)
rows = []
bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=120, return_mode="median")
for M, K, N in SHAPES[part::nparts]:
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16); w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    t0 = bench(lambda: torch.matmul(a, w.t()))
    row = dict(M=M, K=K, N=N, cublas=t0)
    Kp, Np = -(-K // 64) * 64, -(-N // 256) * 256
    ap = torch.zeros(M, Kp, device="cuda", dtype=torch.bfloat16); wp = torch.zeros(Np, Kp, device="cuda", dtype=torch.bfloat16)
    row["cublas_padded"] = bench(lambda: torch.matmul(ap, wp.t())) / t0
    for name, cfg in V.items():
        try:
            row[name] = bench(lambda: gemm(a, w, config=cfg)) / t0
        except Exception as e:
            row[name] = repr(e)[:100]
    row["s3g8_padded"] = bench(lambda: gemm(ap, wp, config=V["s3g8"])) / t0
    row["s3g8_padK"] = bench(lambda: gemm(ap, wp[:N], config=V["s3g8"])) / t0
    rows.append(row)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
json.dump(rows, open(out, "w"), indent=1)
