"""Where a fused op's time goes, against what the hardware allows: one row per shape, timed in one run.

    torchrun --nproc-per-node 2 scripts/bench_overlap.py --out overlap.json [--shapes ag:M,K,N rs:M,K,N ...]

Shapes are per rank, as the profiler's: ``ag:M,K,N`` (M gathered rows, K, N local columns) and
``rs:M,K,N`` (M rows, K local, N). Every case runs on every rank, interleaved over rounds (the
project's timer: throughput, latency and host time, medians over rounds, max over ranks):

- ``cublas``: ``torch.matmul`` of the per-rank GEMM (AG: the gathered ``[M, K]``).
- ``core``: fluxlite's GEMM core alone on the same problem (one rank's schedule, nothing waits).
- ``kernel``: the fused kernel with the op's schedule, every flag already set and the peers' data
  already in place: no producer, no alignment step, no communication.
- ``kernel+copy``: the same kernel while the copy engine moves the op's bytes beside it
  (:mod:`fluxlite.profile.limit`): the fused call without its waits.
- ``limit``: cuBLAS with the same transfer beside it (the overlap limit).
- ``copy``: the transfer alone; ``nccl``: the collective alone.
- ``sequential``, ``fused``: fluxlite's ops; ``torch``: ``torch.ops.symm_mem``'s fused op.

So ``core/cublas`` is the core's cost, ``kernel/core`` the schedule's and waits' bookkeeping,
``kernel+copy/kernel`` the transfer's interference, and ``fused/kernel+copy`` what the protocol
(alignment, producer, real waits) adds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fluxlite  # noqa: E402
from fluxlite import schedule as sch  # noqa: E402
from fluxlite._sequential import all_gather_rows, reduce_scatter_rows  # noqa: E402
from fluxlite.epilogue import PLAIN  # noqa: E402
from fluxlite.fused import state_of  # noqa: E402
from fluxlite.ops import AG, RS  # noqa: E402
from fluxlite.group import resolve_group  # noqa: E402
from fluxlite.kernels import ag_gemm as ag_kernel  # noqa: E402
from fluxlite.kernels import gemm_rs as rs_kernel  # noqa: E402
from fluxlite.profile.limit import limit_case  # noqa: E402
from fluxlite.profile.run import enable_torch_symm_mem  # noqa: E402
from fluxlite.timing import Timer, run_each_once, time_rounds  # noqa: E402
from fluxlite.workspace import get_workspace  # noqa: E402

SHAPES = ["ag:8192,8192,14336", "rs:8192,14336,8192", "ag:8192,8192,5120", "rs:8192,5120,8192",
          "ag:16384,8192,4096", "rs:16384,4096,8192", "ag:4096,8192,14336", "ag:8192,8192,5504",
          "rs:8192,5504,8192", "ag:6000,5000,7000", "rs:6000,7000,5000", "ag:2048,8192,7168"]
TIMEOUT_S = 30.0


def parse_shape(text: str) -> tuple[str, int, int, int]:
    try:
        op, dims = text.split(":")
        M, K, N = (int(v) for v in dims.split(","))
        if op not in ("ag", "rs") or min(M, K, N) < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is ag:M,K,N or rs:M,K,N with positive sizes, got {text!r}") from None
    return op, M, K, N


def preset_flags(W: int, signature: tuple[int, ...], device) -> torch.Tensor:
    """A flag array whose parity-0 region has every ready and data flag set and every peer's signature
    equal to ``signature``: the kernel's waits all pass at their first look."""
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    flags[: sch.region_slots(W)] = sch.SET
    for p in range(W):
        at = sch.signature_slot(W, 0, p)
        flags[at : at + sch.SIG_WORDS] = torch.tensor(signature, dtype=torch.int32)
    return flags.to(device)


def cases(op: str, M: int, K: int, N: int, tp, device, dtype, sets: int):
    """``(make, {case: fn(x)}, transfer)`` for one shape (module docstring)."""
    W, r = tp.world_size, tp.rank
    ag = op == "ag"
    fl_op = fluxlite.ag_gemm if ag else fluxlite.gemm_rs
    state = state_of(get_workspace(tp.group, device, timeout=TIMEOUT_S), TIMEOUT_S)

    def make():
        a = torch.randn(M // W if ag else M, K, device=device, dtype=dtype)
        x = dict(a=a, w=(torch.randn(N, K, device=device) / K**0.5).to(dtype))
        x["full"] = all_gather_rows(a, tp) if ag else a
        if not ag:
            x["partial"] = torch.randn(M, N, device=device, dtype=dtype)
        return x

    inputs = [make() for _ in range(sets)]
    x0 = inputs[0]
    op = AG if ag else RS
    plan = op.prepare(state, op.check(x0["a"], x0["w"], None, group=tp.group, impl="fused", timeout=TIMEOUT_S,
                                      out=None), None)
    flags = preset_flags(W, plan.signature, device)
    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32, device=device)
    error = torch.zeros(16, dtype=torch.int32, device=device)
    call = torch.ones(1, dtype=torch.int32, device=device)
    cache: dict = {}
    common = dict(blocks=plan.blocks, tiles=plan.tiles, flags=flags, sig=plan.signature_dev, error=error, call=call,
                  world_size=W, sig_base=sch.signature_slot(W, 0, 0), timeout_s=TIMEOUT_S, config=plan.config,
                  cache=cache)
    local_tiles = plan.sched.local_tiles(plan.num_n)
    mc = M // W
    # Separate buffers (not the workspace's, which the fused calls use): the peers' data "in place".
    gathered = torch.randn(M, K, device=device, dtype=dtype) if ag else None
    recv = torch.randn(W, mc, N, device=device, dtype=dtype) if not ag else None
    partial = torch.empty(W, mc, N, device=device, dtype=dtype) if not ag else None

    def kernel(x):
        counters.zero_()
        if ag:
            out = x["a"].new_empty(M, N)
            ag_kernel.launch(a_local=x["a"], gathered=gathered, weight=x["w"], out=out, bias=None, ep=PLAIN,
                             scale_local=None, scale_gathered=None, local_tiles=local_tiles, **common)
        else:
            out = x["a"].new_empty(mc, N)
            rs_kernel.launch(a=x["a"], weight=x["w"], out=out, bias=None, partial=partial, recv=recv,
                             peer_tiles=plan.tiles.shape[0] - local_tiles, counters=counters, rank=r, ep=PLAIN,
                             **common)
        return out

    def cublas(x):
        return torch.matmul(x["full"], x["w"].t())

    limit, copy, transfer = limit_case(tp, "ag_gemm" if ag else "gemm_rs", M, K, N, dtype, device, cublas, TIMEOUT_S)

    def kernel_copy(x):
        transfer.start()
        out = kernel(x)
        transfer.join()
        return out

    group_name = tp.group.group_name
    if ag:
        nccl = lambda x: all_gather_rows(x["a"], tp)  # noqa: E731
        torch_op = lambda x: torch.ops.symm_mem.fused_all_gather_matmul(x["a"], [x["w"].t()], 0, group_name)[1][0]  # noqa: E731
    else:
        nccl = lambda x: reduce_scatter_rows(x["partial"], tp)  # noqa: E731
        torch_op = lambda x: torch.ops.symm_mem.fused_matmul_reduce_scatter(x["a"], x["w"].t(), "sum", 0, group_name)  # noqa: E731
    if device.type != "cuda":
        torch_op = None
    fns = {
        "cublas": cublas,
        "core": lambda x: ag_kernel.gemm(x["full"], x["w"], config=plan.config),
        "kernel": kernel,
        "kernel+copy": kernel_copy,
        "limit": limit,
        "copy": copy,
        "nccl": nccl,
        "sequential": lambda x: fl_op(x["a"], x["w"], group=tp.group, impl="sequential"),
        "fused": lambda x: fl_op(x["a"], x["w"], group=tp.group, impl="fused", timeout=TIMEOUT_S),
        "torch": torch_op,
    }
    return inputs, {k: f for k, f in fns.items() if f is not None}, transfer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in SHAPES],
                        metavar="ag:M,K,N")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sets", type=int, default=2, help="input sets rotated over (L2)")
    parser.add_argument("--out", default=None, help="JSON file")
    args = parser.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:  # a smoke run on CPU ranks (kernels interpreted: keep the shapes tiny)
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    tp = resolve_group(None)
    if device.type == "cuda":
        enable_torch_symm_mem(tp)
    timer = Timer(tp, device)
    rows = []
    for op, M, K, N in args.shapes:
        if M % tp.world_size:
            continue
        t0 = time.perf_counter()
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        inputs, fns, transfer = cases(op, M, K, N, tp, device, dtype, args.sets)
        outputs, failed = run_each_once(timer, fns, inputs[0])
        ref = outputs.get("sequential")
        errs = {k: float((v.float() - ref.float()).norm() / ref.float().norm())
                for k, v in outputs.items() if ref is not None and k in ("fused", "torch")}
        del outputs
        times, batch = time_rounds(timer, fns, inputs, rounds=args.rounds, warmup=2, batch_ms=20.0, max_batch=30)
        transfer.close()
        tp_ms = {k: v["throughput"] for k, v in times.items()}
        row = dict(op=op, M=M, K=K, N=N, times_ms=times, failed=failed, rel_err=errs, batch=batch)
        rows.append(row)
        if tp.rank == 0:
            c = tp_ms.get("cublas", float("nan"))
            lim = tp_ms.get("limit", float("nan"))
            show = " ".join(f"{k}={v / c:.3f}" for k, v in tp_ms.items() if k not in ("copy", "nccl"))
            lat = times.get("fused", {}).get("latency", float("nan")) / times.get("sequential", {}).get("latency", float("nan"))
            print(f"{op} {M}x{K}->{N}: cublas {c:.3f} ms, limit/cublas {lim / c:.3f}, fused/limit "
                  f"{tp_ms.get('fused', float('nan')) / lim:.3f}, copy {tp_ms.get('copy', 0):.3f} ms, nccl "
                  f"{tp_ms.get('nccl', 0):.3f} ms, lat fused/seq {lat:.3f} | ratios to cublas: {show} "
                  f"| failed {list(failed)} err {errs} ({time.perf_counter() - t0:.0f} s)", flush=True)
        fluxlite.release_workspaces()
    if tp.rank == 0 and args.out:
        import triton

        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu", world_size=tp.world_size, torch=torch.__version__,
                           triton=triton.__version__, date=time.strftime("%Y-%m-%d"), command=" ".join(sys.argv),
                           rows=rows), f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
