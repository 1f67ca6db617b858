"""Queued fused gemm_ar calls per shape (SH=MxKxN,...), both ranks: 5 rounds of 20 calls behind a
sleep, CUDA events around each round; prints the median time per call. GPPS sets
kernels.gather_end.PROGRAMS_PER_SM where the module has it."""
import os, sys, statistics as st
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
import fluxlite
ge = sys.modules["fluxlite.kernels.gather_end"]
if os.environ.get("GPPS") and hasattr(ge, "PROGRAMS_PER_SM"):
    ge.PROGRAMS_PER_SM = int(os.environ["GPPS"])
SH = [tuple(int(v) for v in s.split("x")) for s in os.environ["SH"].split(",")]
tp = fluxlite.init(); rank = tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
for M, K, N in SH:
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    wt = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    op = os.environ.get("OP", "ar")
    if op == "ag_gelu":
        a = torch.randn(M // tp.world_size, K, device=dev, dtype=torch.bfloat16)
        bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        f = lambda: fluxlite.ag_gemm(a, wt, bias, activation="gelu", impl="fused")
    else:
        f = lambda: fluxlite.gemm_ar(a, wt, impl="fused")
    for _ in range(5):
        f()
    per = []
    for _ in range(5):
        torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(50_000_000)
        s.record()
        for _ in range(20):
            f()
        e.record(); torch.cuda.synchronize()
        per.append(s.elapsed_time(e) / 20 * 1e3)
    if rank == 0:
        print(f"{os.environ.get('TAG')} {op} {M}x{K}x{N} {st.median(per):8.1f} us  ({min(per):.1f}-{max(per):.1f})", flush=True)
fluxlite.release_workspaces(); dist.destroy_process_group()
