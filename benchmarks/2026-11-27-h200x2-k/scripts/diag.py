"""Why auto's fused SwiGLU ran slower than forced fused: forced fused (no config), fused with the default config
named (what auto runs), sequential, interleaved, each round's throughput time printed; auto's first call (its
measurement) between the two halves. nvidia-smi logs clocks and power meanwhile (diag_smi.csv)."""
import os, sys, statistics as st, importlib
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import fluxlite
from fluxlite.dispatch import Choice
from fluxlite.kernels.gemm_core import GemmConfig
agmod = importlib.import_module("fluxlite.ops.ag_gemm")
AG = agmod.AG
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
NAMED = Choice("fused", GemmConfig(), "measured")
def tp(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
    for _ in range(n): fn()
    e.record(); e.synchronize(); return s.elapsed_time(e) / n
for M, K, n, act in [(16384, 2000, 6672, "swiglu"), (8192, 5000, 7000, "gelu"), (16384, 2000, 6672, "gelu")]:
    g = torch.Generator(device="cuda").manual_seed(M + K + n)
    a = torch.randn(M // 2, K, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(2 * n if act == "swiglu" else n, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(w.shape[0], device="cuda", generator=g).to(torch.bfloat16)
    fns = {"forced": lambda: fluxlite.ag_gemm(a, w, b, impl="fused", activation=act),
           "named": lambda: AG._call(a, w, b, None, "fused", None, None, dict(activation=act), forced=NAMED),
           "seq": lambda: fluxlite.ag_gemm(a, w, b, impl="sequential", activation=act)}
    ref = fns["seq"]().float()
    for k, f in fns.items():
        err = ((f().float() - ref).norm() / ref.norm()).item()
        if r == 0: print(f"{M}x{K}->{n} {act} {k} err {err:.1e}", flush=True)
    res = {k: [] for k in [*fns, "auto"]}
    for half in range(2):
        if half == 1:
            fns["auto"] = lambda: fluxlite.ag_gemm(a, w, b, impl="auto", activation=act)
            fns["auto"]()
        for _ in range(4):
            for k, f in fns.items():
                res[k].append(tp(f))
    if r == 0:
        for k, v in res.items():
            print(f"{M}x{K}->{n} {act} {k:7s} " + " ".join(f"{x:.3f}" for x in v), flush=True)
dist.destroy_process_group()
