"""Small-M fused AG-GEMM and GEMM-RS at TP=2: the Triton kernel against the matmul consumer (cuBLAS per
chunk), forced by patching Op.consumer_of; sequential and cuBLAS alone beside them. Device time of 20
eager calls back to back, latency (barrier + sync around one call, wall), host time per call; median
of 5 rounds, max over ranks; outputs checked against float32 (poisoned first)."""
import statistics as st, sys, time, torch, torch.distributed as dist
import fluxlite
from fluxlite.ops import AG, RS
from fluxlite.ops.op import Op
dist.init_process_group("nccl"); r = dist.get_rank(); W = dist.get_world_size(); torch.cuda.set_device(r)
FORCE = [None]
orig = Op.consumer_of
def forced(self, state, args, config):
    c = orig(self, state, args, config)
    return FORCE[0] if FORCE[0] and config is None and self.has_matmul_consumer(args) else c
Op.consumer_of = forced
from timing2 import lat, thr
cases = [("ag", 2, 8192, 2560), ("ag", 16, 8192, 2560), ("ag", 64, 8192, 7168), ("ag", 128, 4096, 4096),
         ("ag", 256, 8192, 2560), ("ag", 512, 8192, 7168), ("ag", 1024, 4096, 4096), ("ag", 2048, 8192, 2560),
         ("ag", 4096, 8192, 7168),
         ("rs", 2, 14336, 8192), ("rs", 16, 7168, 8192), ("rs", 64, 4096, 8192), ("rs", 256, 14336, 8192),
         ("rs", 512, 7168, 8192), ("rs", 1024, 4096, 8192), ("rs", 2048, 14336, 8192), ("rs", 4096, 4096, 8192)]
gen = torch.Generator(device="cuda").manual_seed(5 + r)
if r == 0:
    print("op M K N | thr triton matmul seq gemm (us) | matmul/triton thr | lat triton matmul seq | matmul/triton lat | "
          "host triton matmul | errs", flush=True)
for op, M, K, N in cases:
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16); dist.broadcast(w, 0)
    rows = M // W if op == "ag" else M
    vs = ("triton", "torch", "seq")
    a = {v: torch.randn(rows, K, device="cuda", generator=gen).to(torch.bfloat16) for v in vs}
    full = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    f = fluxlite.ag_gemm if op == "ag" else fluxlite.gemm_rs
    def call(v):
        FORCE[0] = None if v == "seq" else v
        return f(a[v], w, impl="sequential" if v == "seq" else "fused")
    errs = []
    for v in vs:
        o = call(v); o = call(v); o = call(v).float()
        if op == "ag":
            g = [torch.empty_like(a[v]) for _ in range(W)]; dist.all_gather(g, a[v]); ref = torch.cat(g).float() @ w.float().t()
        else:
            p = a[v].float() @ w.float().t(); dist.all_reduce(p); ref = p[r * (M // W):(r + 1) * (M // W)]
        errs.append(((o - ref).norm() / ref.norm()).item())
    T = {v: [] for v in vs}; L = {v: [] for v in vs}; G = []
    for _ in range(5):
        for v in vs:
            T[v].append(thr(lambda v=v: call(v))); L[v].append(lat(lambda v=v: call(v)))
        G.append(thr(lambda: torch.matmul(full, w.t()))[0])
    res = torch.tensor([[st.median(x[0] for x in T[v]) for v in vs] + [st.median(G)] + [st.median(L[v]) for v in vs]
                        + [st.median(x[1] for x in T[v]) for v in vs[:2]]], device="cuda")
    dist.all_reduce(res, op=dist.ReduceOp.MAX)
    tt, tm, ts, tg, lt_, lm, ls, ht, hm = res[0].tolist()
    if r == 0:
        print(f"{op} {M} {K} {N} | {tt:.1f} {tm:.1f} {ts:.1f} {tg:.1f} | {tm/tt:.3f} | {lt_:.1f} {lm:.1f} {ls:.1f} | {lm/lt_:.3f} | "
              f"{ht:.1f} {hm:.1f} | " + " ".join(f"{e:.1e}" for e in errs), flush=True)
dist.destroy_process_group()
