"""Where the host time of one fused call goes: per-call host time of torch.matmul, sequential and
fused (AG, RS, and GEMM-AllReduce at a decode size), then what ``impl="auto"`` adds to the host time
of the implementation it chose (a repeated call should cost a dictionary look-up more), then a
cProfile of fused and ``auto`` calls, sorted by own time.

    torchrun --standalone --nproc-per-node 2 scripts/profile_host.py [--M 4096 --K 8192 --N 8192]

The GPU is kept busy with ``torch.cuda._sleep`` so the host never blocks on a full launch queue and
what is measured is the host's own work.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fluxlite  # noqa: E402
from fluxlite._cli import ArgumentParser, positive  # noqa: E402
from fluxlite.timing import Timer  # noqa: E402


def host_us(timer: Timer, fns: dict, rounds: int = 9, calls: int = 8) -> dict[str, float]:
    """Median host microseconds per call of each of ``fns`` (:meth:`fluxlite.timing.Timer.host`: the
    ranks aligned, the device asleep). The rounds interleave the callables, in an order that rotates
    from round to round, so that the host's drift (clocks, other processes) falls on all of them
    alike and two figures compare within a round's noise."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name] += [timer.host(lambda _x: fns[name](), None, 2.0) for _ in range(calls)]
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = ArgumentParser(prog="profile_host.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--M", type=positive(), default=4096, help="rows of AG-GEMM (gathered) and GEMM-RS")
    parser.add_argument("--K", type=positive(), default=8192, help="the hidden size (AG's K, RS's K over all ranks)")
    parser.add_argument("--N", type=positive(), default=8192, help="output columns (AG's over all ranks, RS's)")
    parser.add_argument("--decode-rows", type=positive(), default=64, help="rows of the GEMM-AllReduce calls")
    parser.add_argument("--top", type=positive(), default=25, help="lines of each cProfile listing")
    args = parser.parse_args()
    tp = fluxlite.init()
    W, M, K, N = tp.world_size, args.M, args.K, args.N
    a_ag = torch.randn(M // W, K, device="cuda", dtype=torch.bfloat16)
    w_ag = torch.randn(N // W, K, device="cuda", dtype=torch.bfloat16)
    a_rs = torch.randn(M, K // W, device="cuda", dtype=torch.bfloat16)
    w_rs = torch.randn(N, K // W, device="cuda", dtype=torch.bfloat16)
    full = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a_ar = torch.randn(args.decode_rows, K // W, device="cuda", dtype=torch.bfloat16)
    calls = {"ag": lambda impl: fluxlite.ag_gemm(a_ag, w_ag, impl=impl),
             "rs": lambda impl: fluxlite.gemm_rs(a_rs, w_rs, impl=impl),
             "ar": lambda impl: fluxlite.gemm_ar(a_ar, w_rs, impl=impl)}
    keys = {"ag": ("ag_gemm", a_ag, w_ag, M), "rs": ("gemm_rs", a_rs, w_rs, M),
            "ar": ("gemm_ar", a_ar, w_rs, args.decode_rows)}  # (op, a, weight, the GEMM's rows per rank)
    fns = {"matmul": lambda: torch.matmul(full, w_ag.t()),
           "ag_fused_keep": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused", return_gathered=True)}
    for op, call in calls.items():
        for impl in ("sequential", "decomposed", "fused", "auto"):
            fns[f"{op}_{impl}"] = lambda call=call, impl=impl: call(impl)
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    dist.barrier()
    res = host_us(Timer(tp, torch.device("cuda", torch.cuda.current_device())), fns)
    if tp.rank == 0:
        print("host us per call:", {k: round(v, 1) for k, v in res.items()}, flush=True)
        for op in calls:
            chosen = _auto_choice(keys[op][0], tp, *keys[op][1:])
            print(f"{op}: auto runs {chosen}, {res[f'{op}_auto'] - res[f'{op}_{chosen}']:+.1f} us of host time "
                  f"over impl={chosen!r}", flush=True)
    for name in ("ag_fused", "ag_auto", "rs_fused"):
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


def _auto_choice(op: str, tp, a: torch.Tensor, weight: torch.Tensor, rows: int) -> str:
    """The implementation ``auto`` runs for ``op``'s calls on ``a`` and ``weight`` (``rows``: the GEMM's
    rows on each rank), as dispatch remembers it."""
    from fluxlite import dispatch

    choice = dispatch.remembered(dispatch.Key.of(op, tp, a, weight, rows))
    return "sequential" if choice is None else choice.impl


if __name__ == "__main__":
    main()
