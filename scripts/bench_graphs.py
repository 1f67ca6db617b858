"""Fused calls replayed from a CUDA graph against the same calls made eagerly, and sequential.

    torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --out bench_graphs.json

For each shape: ``fused`` (eager), ``fused graph`` (a graph of ``--calls`` fused calls, replayed;
figures are per call), and ``sequential`` (eager NCCL then cuBLAS), each timed three ways by
:mod:`fluxlite.profile.timing` (throughput, latency, host; medians over rounds, max over ranks).
The aim: a replayed call's device time no more than the eager call's, and its host time at most
15 us. With more ranks than GPUs (ranks sharing a GPU), host times still mean something; device
times do not.
"""

from __future__ import annotations

import json
import os
import random
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fluxlite  # noqa: E402
from fluxlite._cli import ArgumentParser  # noqa: E402
from fluxlite.timing import Timer, time_rounds  # noqa: E402

# (op, tokens M, K, N) per rank at TP=2: BENCHMARKS.md's llama-70b shapes, then random ragged ones.
ANCHORS = [("ag", 8192, 8192, 14336), ("rs", 8192, 14336, 8192), ("ag", 4096, 8192, 5120), ("rs", 4096, 4096, 8192)]


def _shapes(seed: int, world: int) -> list[tuple[str, int, int, int]]:
    rng = random.Random(seed)
    extra = [(rng.choice(["ag", "rs"]), world * (rng.randint(200, 3000)), rng.choice([2048, 4096]),
              rng.choice([1536, 2816, 4096])) for _ in range(3)]
    return ANCHORS + extra + [("ag", world * 64, 4096, 2048)]


def _calls(op: str, M: int, K: int, N: int, world: int, impl: str):
    """``(fn, inputs)``: ``fn()`` makes one call on static bf16 inputs of this rank's part."""
    dev = torch.device("cuda", torch.cuda.current_device())
    if op == "ag":
        a, w = torch.randn(M // world, K, device=dev, dtype=torch.bfloat16), torch.randn(N // world, K, device=dev,
                                                                                          dtype=torch.bfloat16)
        return lambda: fluxlite.ag_gemm(a, w, impl=impl)
    a, w = torch.randn(M, K // world, device=dev, dtype=torch.bfloat16), torch.randn(N, K // world, device=dev,
                                                                                      dtype=torch.bfloat16)
    return lambda: fluxlite.gemm_rs(a, w, impl=impl)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="fused calls per captured graph")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    tp = fluxlite.init()
    W = tp.world_size
    shared = W > torch.cuda.device_count()
    timer = Timer(tp, torch.device("cuda", torch.cuda.current_device()))
    rows = []
    for op, M, K, N in _shapes(args.seed, W):
        fused, sequential = _calls(op, M, K, N, W, "fused"), _calls(op, M, K, N, W, "sequential")
        fused()  # the warm-up a capture needs: workspace, plan, kernel
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(args.calls):
                fused()
        times, _ = time_rounds(timer, {"fused": lambda x: fused(), "fused graph": lambda x: graph.replay(),
                                       "sequential": lambda x: sequential()}, [None], rounds=args.rounds)
        for mode in times["fused graph"]:
            times["fused graph"][mode] /= args.calls
        fluxlite.synchronize()
        rows.append(dict(op=op, M=M, K=K, N=N, **{f"{impl} {mode}": ms for impl, t in times.items()
                                                   for mode, ms in t.items()}))
        if tp.rank == 0:
            r = rows[-1]
            print(f"{op} M={M} K={K} N={N}: host us/call fused {1e3 * r['fused host']:.1f}, graph "
                  f"{1e3 * r['fused graph host']:.1f}, sequential {1e3 * r['sequential host']:.1f}; latency ms fused "
                  f"{r['fused latency']:.3f}, graph {r['fused graph latency']:.3f}, sequential "
                  f"{r['sequential latency']:.3f}; throughput ms fused {r['fused throughput']:.3f}, graph "
                  f"{r['fused graph throughput']:.3f}, sequential {r['sequential throughput']:.3f}", flush=True)
        del graph
    if tp.rank == 0 and args.out:
        meta = dict(world_size=W, shared_gpus=shared, device=torch.cuda.get_device_name(), torch=torch.__version__,
                    calls_per_graph=args.calls, rounds=args.rounds)
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    fluxlite.release_workspaces()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
