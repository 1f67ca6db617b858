"""AG-GEMM at small chunks, TP=2: rows pushed by the SMs ahead of the consumer (new) against the copy
engine's producer (old: SM_PUSH_MAX_BYTES = 0), one process, the variants interleaved on tensors of
their own; sequential (NCCL all-gather + cuBLAS) beside them. Per case: throughput (20 eager calls back
to back, device time per call), latency (barrier + sync around one call, wall time), host time per
eager call, and a user's one-call CUDA graph replayed back to back (device and host time per replay).
Median of 5 rounds, max over ranks. Results checked against float32."""
import importlib, statistics as st, sys, time, torch, torch.distributed as dist
import fluxlite
agm = importlib.import_module("fluxlite.ops.ag_gemm")
dist.init_process_group("nccl"); r = dist.get_rank(); W = dist.get_world_size(); torch.cuda.set_device(r)
BIG = 1 << 40
def set_route(new): agm.SM_PUSH_MAX_BYTES = BIG if new else 0
from timing2 import lat, thr
def graph_of(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    torch.cuda.synchronize(); return g
def gthr(g, n=20):
    for _ in range(3): g.replay()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    t0 = time.perf_counter(); s.record()
    for _ in range(n): g.replay()
    h = (time.perf_counter() - t0) / n
    e.record(); e.synchronize(); return s.elapsed_time(e) / n * 1e3, h * 1e6
shapes = [(1, 8192, 2560, None), (8, 8192, 2560, None), (32, 8192, 7168, None), (64, 4096, 4096, None),
          (128, 8192, 2560, None), (128, 5120, 3456, None), (256, 4096, 4096, None), (96, 3000, 5000, None),
          (64, 8192, 7168, "gelu"), (64, 8192, 7168, "swiglu"), (512, 4096, 4096, None)]
import torch.nn.functional as F
gen = torch.Generator(device="cuda").manual_seed(1 + r)
# the largest workspace first: once a user's graph captured a fused call, the workspace may not grow
for new in (True, False):
    set_route(new)
    fluxlite.ag_gemm(torch.zeros(max(s[0] for s in shapes), max(s[1] for s in shapes), device="cuda",
                                 dtype=torch.bfloat16), torch.zeros(128, max(s[1] for s in shapes), device="cuda",
                                 dtype=torch.bfloat16), impl="fused")
torch.cuda.synchronize()
if r == 0:
    print("m/rank K N | KiB | thr new old seq (us) | new/old thr | lat new old seq | new/old lat | host new old seq | "
          "graph dev new old | graph host new old | errs", flush=True)
for m, K, N, act in shapes:
    w = (torch.randn(2 * N if act == "swiglu" else N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)  # same on every rank
    dist.broadcast(w, 0)
    a = {v: torch.randn(m, K, device="cuda", generator=gen).to(torch.bfloat16) for v in ("new", "old", "seq")}
    out = {v: torch.empty(W * m, N, device="cuda", dtype=torch.bfloat16) for v in a}
    def call(v):
        set_route(v == "new")
        return fluxlite.ag_gemm(a[v], w, impl="sequential" if v == "seq" else "fused", out=out[v], activation=act)
    errs = []
    for v in a:  # correctness, output poisoned first
        out[v].fill_(float("nan")); call(v); call(v); call(v)
        g = [torch.empty_like(a[v]) for _ in range(W)]; dist.all_gather(g, a[v])
        ref = torch.cat(g).float() @ w.float().t()
        ref = F.gelu(ref) if act == "gelu" else F.silu(ref[:, :N]) * ref[:, N:] if act == "swiglu" else ref
        errs.append(((out[v].float() - ref).norm() / ref.norm()).item())
    T = {v: [] for v in a}; L = {v: [] for v in a}
    graphs = {}
    for v in ("new", "old"):
        set_route(v == "new"); graphs[v] = graph_of(lambda v=v: call(v))
    G = {v: [] for v in graphs}
    for _ in range(5):
        for v in a:
            T[v].append(thr(lambda v=v: call(v)))
            L[v].append(lat(lambda v=v: call(v)))
        for v in graphs:
            G[v].append(gthr(graphs[v]))
    res = torch.tensor([[st.median(x[0] for x in T[v]) for v in a] + [st.median(x[1] for x in T[v]) for v in a]
                        + [st.median(L[v]) for v in a] + [st.median(x[0] for x in G[v]) for v in G]
                        + [st.median(x[1] for x in G[v]) for v in G]], device="cuda")
    dist.all_reduce(res, op=dist.ReduceOp.MAX)
    t = res[0].tolist()
    tn, to, ts, hn, ho, hs, ln, lo, ls, gn, go, ghn, gho = t
    if r == 0:
        print(f"{m} {K} {N} {act or ''} | {m*K*2//1024} | {tn:.1f} {to:.1f} {ts:.1f} | {tn/to:.3f} | {ln:.1f} {lo:.1f} {ls:.1f} | "
              f"{ln/lo:.3f} | {hn:.1f} {ho:.1f} {hs:.1f} | {gn:.1f} {go:.1f} | {ghn:.1f} {gho:.1f} | "
              + " ".join(f"{e:.1e}" for e in errs), flush=True)
    del graphs
dist.destroy_process_group()
