"""Kineto timeline of 20 queued calls (behind a sleep) and 20 back-to-back calls: eager fused vs a
one-call graph (g1) vs two one-call graphs alternating (g1ab).  Per variant: period per call,
consumer-kernel durations, copy durations, gap between consecutive consumer kernels."""
import os, sys, statistics, json
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity
import fluxlite

SH = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("SH", "8192x8192x14336").split(",")]
N_CALLS = 20


def main():
    tp = fluxlite.init(); W = tp.world_size; rank = tp.rank
    dev = torch.device("cuda", torch.cuda.current_device())
    out = {}
    for M, K, N in SH:
        a = torch.randn(M // W, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(N // W, K, device=dev, dtype=torch.bfloat16)
        f = lambda: fluxlite.ag_gemm(a, w, impl="fused")
        for _ in range(4):
            f()
        gs = []
        for _ in range(3):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                f()
            gs.append(g)
        g1, ga, gb = gs
        flip = [0]
        def ab():
            (gb if flip[0] else ga).replay(); flip[0] ^= 1
        variants = {"eager": f, "g1": g1.replay, "g1ab": ab}
        for queued in (True, False):
            for name, fn in list(variants.items()) * 2:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    if queued:
                        torch.cuda._sleep(60_000_000)
                    for _ in range(N_CALLS):
                        fn()
                    torch.cuda.synchronize()
                ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
                r = sorted([(e.name[:40], e.time_range.start, e.time_range.end - e.time_range.start) for e in ev],
                           key=lambda t: t[1])
                key = f"{M}x{K}x{N} {'queued' if queued else 'b2b'} {name}"
                out.setdefault(key, []).append(r)
                if rank == 0:
                    print(key, len(r), flush=True)
        if rank == 0:
            # one detailed timeline sample of g1 queued: first 4 calls' kernel/copy starts relative
            torch.cuda._sleep(60_000_000)
    if True:
        with open(os.environ.get("OUTJ", "trace31.json") + f".{rank}", "w") as fh:
            json.dump(out, fh, indent=1)
    fluxlite.release_workspaces(); dist.destroy_process_group()


main()
