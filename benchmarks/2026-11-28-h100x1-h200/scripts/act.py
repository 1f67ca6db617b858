"""AG-GEMM with an activation: the Triton kernel's epilogue (triton) against the matmul consumer followed by the
activation's elementwise pass (torch), and sequential (NCCL all-gather, GEMM with bias, activation), TP=2,
throughput (20 calls back to back) and latency (a barrier and a sync around each call), three rounds, medians."""
import os, statistics as st, sys, json
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import fluxlite
import importlib
agmod = importlib.import_module("fluxlite.ops.ag_gemm")

dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
FORCE = {"c": None}
orig = agmod.AllGatherGemm.consumer_of
agmod.AllGatherGemm.consumer_of = lambda self, state, args, config: FORCE["c"] or orig(self, state, args, config)
SHAPES_ALL = [(8192, 5000, 7000), (16384, 2000, 6672), (3184, 15480, 7464), (2048, 7000, 2816), (6000, 7000, 10000),
          (12000, 3000, 7000), (8192, 4968, 7832), (8192, 8192, 3584)]
SHAPES = [s for s in SHAPES_ALL if not os.environ.get("SHAPES") or "%dx%dx%d" % s in os.environ["SHAPES"].split(",")]
def timeit(fn, mode, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    if mode == "tp":
        s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
        for _ in range(n): fn()
        e.record(); e.synchronize(); return s.elapsed_time(e) / n
    ts = []
    for _ in range(n // 2):
        dist.barrier(); torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return st.median(ts)
rows = []
for M, K, n in SHAPES:
    for act in [None if x == "none" else x for x in os.environ.get("ACTS", "gelu,swiglu").split(",")]:
        g = torch.Generator(device="cuda").manual_seed(M + K + n)
        a = torch.randn(M // 2, K, device="cuda", generator=g).to(torch.bfloat16)
        w = (torch.randn(2 * n if act == "swiglu" else n, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
        b = torch.randn(w.shape[0], device="cuda", generator=g).to(torch.bfloat16)
        ref = fluxlite.ag_gemm(a, w, b, impl="sequential", activation=act).float()
        res = {}
        for _round in range(3):
            for name in os.environ.get("NAMES", "triton,torch,sequential").split(","):
                FORCE["c"] = None if name in ("sequential", "fused") else name
                impl = "sequential" if name == "sequential" else "fused"
                if name == "auto": impl = "auto"
                fn = lambda: fluxlite.ag_gemm(a, w, b, impl=impl, activation=act)
                out = fn().float(); err = ((out - ref).norm() / ref.norm()).item()
                for mode in ("tp", "lat"):
                    res.setdefault((name, mode), []).append(timeit(fn, mode))
                res.setdefault((name, "err"), []).append(err)
        FORCE["c"] = None
        med = {k: st.median(v) if k[1] != "err" else max(v) for k, v in res.items()}
        row = dict(M=M, K=K, n=n, act=act, **{f"{k[0]}_{k[1]}": v for k, v in med.items()})
        rows.append(row)
        if r == 0 and os.environ.get("NAMES") == "fused,auto,sequential":
            print(f"{M}x{K}->{n} {str(act):6s} fused/seq tp {med[('fused','tp')]/med[('sequential','tp')]:.3f} lat {med[('fused','lat')]/med[('sequential','lat')]:.3f} | auto/seq tp {med[('auto','tp')]/med[('sequential','tp')]:.3f} lat {med[('auto','lat')]/med[('sequential','lat')]:.3f} | ms fused {med[('fused','tp')]:.3f} seq {med[('sequential','tp')]:.3f}", flush=True)
        elif r == 0 and "torch" not in os.environ.get("NAMES", "torch"):
            print(f"{M}x{K}->{n} {act:6s} triton/seq tp {med[('triton','tp')]/med[('sequential','tp')]:.3f} lat {med[('triton','lat')]/med[('sequential','lat')]:.3f} | ms triton {med[('triton','tp')]:.3f} {med[('triton','lat')]:.3f} seq {med[('sequential','tp')]:.3f} {med[('sequential','lat')]:.3f}", flush=True)
        elif r == 0:
            print(f"{M}x{K}->{n} {act:6s} triton/torch tp {med[('triton','tp')]/med[('torch','tp')]:.3f} lat {med[('triton','lat')]/med[('torch','lat')]:.3f} | "
                  f"triton/seq tp {med[('triton','tp')]/med[('sequential','tp')]:.3f} lat {med[('triton','lat')]/med[('sequential','lat')]:.3f} | "
                  f"torch/seq tp {med[('torch','tp')]/med[('sequential','tp')]:.3f} lat {med[('torch','lat')]/med[('sequential','lat')]:.3f} | "
                  f"ms triton {med[('triton','tp')]:.3f} torch {med[('torch','tp')]:.3f} seq {med[('sequential','tp')]:.3f} | err {med[('triton','err')]:.1e} {med[('torch','err')]:.1e} {med[('sequential','err')]:.1e}", flush=True)
if r == 0 and len(sys.argv) > 1:
    json.dump(rows, open(sys.argv[1], "w"), indent=1)
dist.destroy_process_group()
