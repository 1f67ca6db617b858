"""Splits of each AG/RS fused plan after one call per shape.  torchrun --nproc-per-node 2 plan_splits.py"""
import os, sys
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite.process import PROCESS
tp = fluxlite.init(); W, r = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device()); bf = torch.bfloat16
for op, M, K, N in [("ag", 4556, 2048, 768), ("ag", 4096, 4096, 1792), ("ag", 4096, 8192, 2560), ("ag", 6000, 3000, 1500),
                    ("ag", 3000, 4096, 2200), ("ag", 8192, 8192, 7168), ("rs", 4096, 2048, 8192), ("rs", 3072, 2560, 5000)]:
    if op == "ag":
        fluxlite.ag_gemm(torch.randn(M // W, K, device=dev, dtype=bf), torch.randn(N, K, device=dev, dtype=bf), impl="fused")
    else:
        fluxlite.gemm_rs(torch.randn(M, K, device=dev, dtype=bf), torch.randn(N, K, device=dev, dtype=bf), impl="fused")
torch.cuda.synchronize()
if r == 0:
    for state in PROCESS.fused_states.values():
        for key, plan in state.plans.items():
            print("plan", key[:5], "consumer", key[-1], "splits", plan.sched.splits, "chunk rows", plan.sched.chunk_rows, flush=True)
fluxlite.release_workspaces(); dist.destroy_process_group()
