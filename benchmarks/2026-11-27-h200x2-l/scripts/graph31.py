"""One-call graphs replayed back to back against eager calls: is the parity null call the cost?

Per shape: eager fused; g1 (one call, replayed: every replay after the first shares a parity ->
null call); g1ab (two one-call graphs captured at consecutive parities, replayed alternately: no
null call, same graph size); g2 (two calls in one graph, per call). Throughput (queued behind a
sleep), eager (back to back, no sleep), latency, host.  Null calls per replay counted.
"""
import json, os, sys, random
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer, time_rounds

SHAPES = [("ag", 8192, 8192, 14336), ("rs", 4096, 4096, 8192), ("ag", 992, 2048, 2816), ("ag", 128, 4096, 2048),
          ("rs", 1634, 4096, 4096), ("ag", 3000, 5000, 7000), ("rs", 6000, 3000, 5000), ("ag", 4096, 8192, 5120)]
if os.environ.get("SH"):
    SHAPES = [(t.split(":")[0], *map(int, t.split(":")[1].split("x"))) for t in os.environ["SH"].split(",")]


def make(op, M, K, N, W, impl):
    dev = torch.device("cuda", torch.cuda.current_device())
    if op == "ag":
        a = torch.randn(M // W, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(N // W, K, device=dev, dtype=torch.bfloat16)
        return lambda: fluxlite.ag_gemm(a, w, impl=impl)
    a = torch.randn(M, K // W, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K // W, device=dev, dtype=torch.bfloat16)
    return lambda: fluxlite.gemm_rs(a, w, impl=impl)


def main():
    tp = fluxlite.init()
    W = tp.world_size
    timer = Timer(tp, torch.device("cuda", torch.cuda.current_device()))
    rows = []
    rounds = int(os.environ.get("ROUNDS", 5))
    for op, M, K, N in SHAPES:
        f = make(op, M, K, N, W, "fused")
        s = make(op, M, K, N, W, "sequential")
        f(); f(); f()
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            f()
        ga = torch.cuda.CUDAGraph()
        with torch.cuda.graph(ga):
            f()
        gb = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gb):
            f()
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            f(); f()
        torch.cuda.synchronize()
        state = fluxlite.fused.state_of(fluxlite.get_workspace())
        flip = [0]

        def ab(x):
            (gb if flip[0] else ga).replay(); flip[0] ^= 1
        n0 = state.null_calls
        for _ in range(10):
            g1.replay()
        torch.cuda.synchronize(); n1 = state.null_calls
        for _ in range(10):
            ab(None)
        torch.cuda.synchronize(); n2 = state.null_calls
        fns = {"eager": lambda x: f(), "g1": lambda x: g1.replay(), "g1ab": ab, "g2": lambda x: g2.replay(),
               "seq": lambda x: s()}
        times, _ = time_rounds(timer, fns, [None], rounds=rounds)
        for mode in times["g2"]:
            times["g2"][mode] /= 2
        fluxlite.synchronize()
        row = dict(op=op, M=M, K=K, N=N, null_g1=n1 - n0, null_g1ab=n2 - n1,
                   **{f"{k} {m}": v for k, t in times.items() for m, v in t.items()})
        rows.append(row)
        if tp.rank == 0:
            e = times["eager"]
            print(f"{op} {M}x{K}->{N} null/10: g1 {n1-n0} ab {n2-n1}", flush=True)
            for m in ("throughput", "eager", "latency", "host"):
                if m in e:
                    print(f"  {m:10s} eager {e[m]:.4f} ms | " + " ".join(
                        f"{k} {times[k][m] / e[m]:.3f}" for k in ("g1", "g1ab", "g2", "seq")), flush=True)
        del g1, ga, gb, g2
    if tp.rank == 0:
        with open(os.environ.get("OUTJ", "graph31.json"), "w") as fh:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), fh, indent=1)
    fluxlite.release_workspaces()
    dist.destroy_process_group()


main()
