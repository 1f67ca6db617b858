"""Where the host time of one fused call goes: per-call host time of torch.matmul, sequential and
fused (AG and RS), then a cProfile of fused calls, sorted by own time.

    torchrun --standalone --nproc-per-node 2 scripts/profile_host.py [--M 4096 --K 8192 --N 8192]

The GPU is kept busy with ``torch.cuda._sleep`` so the host never blocks on a full launch queue and
what is measured is the host's own work.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fluxlite  # noqa: E402


def host_us(fn, n: int = 50) -> float:
    times = []
    for _ in range(n):
        torch.cuda._sleep(2_000_000)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--K", type=int, default=8192)
    parser.add_argument("--N", type=int, default=8192)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    tp = fluxlite.init()
    W, M, K, N = tp.world_size, args.M, args.K, args.N
    a_ag = torch.randn(M // W, K, device="cuda", dtype=torch.bfloat16)
    w_ag = torch.randn(N // W, K, device="cuda", dtype=torch.bfloat16)
    a_rs = torch.randn(M, K // W, device="cuda", dtype=torch.bfloat16)
    w_rs = torch.randn(N, K // W, device="cuda", dtype=torch.bfloat16)
    full = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    fns = {
        "matmul": lambda: torch.matmul(full, w_ag.t()),
        "ag_seq": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="sequential"),
        "ag_fused": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused"),
        "ag_fused_keep": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused", return_gathered=True),
        "rs_seq": lambda: fluxlite.gemm_rs(a_rs, w_rs, impl="sequential"),
        "rs_fused": lambda: fluxlite.gemm_rs(a_rs, w_rs, impl="fused"),
    }
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    dist.barrier()
    res = {name: host_us(fn) for name, fn in fns.items()}
    if tp.rank == 0:
        print("host us per call:", {k: round(v, 1) for k, v in res.items()}, flush=True)
    for name in ("ag_fused", "rs_fused"):
        prof = cProfile.Profile()
        torch.cuda._sleep(50_000_000)
        prof.enable()
        for _ in range(50):
            fns[name]()
        prof.disable()
        torch.cuda.synchronize()
        if tp.rank == 0:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
            print(f"== {name}: 50 calls ==\n" + "\n".join(out.getvalue().splitlines()[:args.top + 12]), flush=True)
        dist.barrier()
    fluxlite.synchronize()
    fluxlite.release_workspaces()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
