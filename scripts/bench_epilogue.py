"""The fused epilogue on one GPU: fluxlite's GEMM kernel with and without its epilogue, against
cuBLAS with and without the same epilogue as separate torch ops.

    python3 scripts/bench_epilogue.py --out bench_epilogue.json

Epilogues: ``gelu`` with a row scale and bias (``N`` output columns), and ``swiglu`` with a row
scale and bias (a ``[2N, K]`` weight). Each implementation is checked against a float32 reference,
then timed three ways (docs/benchmarking.md), medians over rounds:

- throughput: 20 calls back to back behind a device sleep, CUDA events, per call;
- latency: a sync, one call, a sync (wall clock);
- host: one call's host time, issued while the device sleeps.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fluxlite._cli import ArgumentParser  # noqa: E402
from fluxlite import epilogue as E  # noqa: E402
from fluxlite.kernels.ag_gemm import gemm  # noqa: E402

ANCHORS = [(8192, 8192, 14336), (8192, 8192, 5120), (4096, 8192, 3584)]


def _shapes(seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    extra = [(rng.choice([1000, 2000, 3000, 6000]) + rng.randint(1, 127), rng.choice([2048, 4096, 5120]),
              rng.choice([1376, 2048, 3584])) for _ in range(3)]
    return ANCHORS + extra + [(256, 8192, 3584), (128, 4096, 1024)]  # random ragged, then small M


def _time(fn, rounds: int) -> dict:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    tp, lat, host = [], [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        start.record()
        for _ in range(20):
            fn()
        end.record()
        torch.cuda.synchronize()
        tp.append(start.elapsed_time(end) / 20)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e3)
        torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    return dict(throughput=statistics.median(tp), latency=statistics.median(lat), host=statistics.median(host))


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    print(f"{'shape':<20}{'epilogue':<8}{'impl':<16}{'tput ms':>9}{'lat ms':>9}{'host ms':>9}{'rel err':>9}")
    for M, K, N in _shapes(args.seed):
        for act in ("gelu", "swiglu"):
            a = torch.randn(M, K, device="cuda").bfloat16()
            w = (torch.randn(2 * N if act == "swiglu" else N, K, device="cuda") / K**0.5).bfloat16()
            b = torch.randn(w.shape[0], device="cuda").bfloat16()
            s = torch.rand(M, device="cuda") + 0.5
            ep = E.Epilogue(act, True, 1.0)
            ref = E.apply(a.float() @ w.float().t(), ep, b.float(), s, torch.float32)
            impls = {
                "cublas": lambda: a @ w.t(),
                "cublas+torch_ep": lambda: E.apply(a @ w.t(), ep, b, s, torch.bfloat16),
                "fluxlite": lambda: gemm(a, w),
                "fluxlite+fused_ep": lambda: gemm(a, w, b, ep=ep, row_scale=s),
            }
            for name, fn in impls.items():
                out = fn()
                err = ((out.float() - ref).norm() / ref.norm()).item() if out.shape == ref.shape else float("nan")
                t = _time(fn, args.rounds)
                rows.append(dict(M=M, K=K, N=N, epilogue=act, impl=name, rel_err=err, **t))
                print(f"{f'{M}x{K}->{N}':<20}{act:<8}{name:<16}{t['throughput']:>9.3f}{t['latency']:>9.3f}"
                      f"{t['host']:>9.3f}{err:>9.1e}", flush=True)
    print("\nratio fused epilogue / (cuBLAS + torch epilogue), per mode:")
    for i in range(0, len(rows), 4):
        fused, unfused = rows[i + 3], rows[i + 1]
        print(f"{rows[i]['M']}x{rows[i]['K']}->{rows[i]['N']} {rows[i]['epilogue']}: "
              + "  ".join(f"{m} {fused[m] / unfused[m]:.3f}" for m in ("throughput", "latency", "host")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
