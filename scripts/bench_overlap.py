"""Where a fused op's time goes, against what the hardware allows: one row per shape, timed in one run.

    torchrun --nproc-per-node 2 scripts/bench_overlap.py --out overlap.json [--shapes ag:M,K,N rs:M,K,N ...]

Shapes are per rank, as the profiler's: ``ag:M,K,N`` (M gathered rows, K, N local columns),
``rs:M,K,N`` (M rows, K local, N) or ``M,K,N`` for both; M divisible by the number of ranks.
(NVLink multicast is off unless NCCL_NVLS_ENABLE etc. are set otherwise.) Every case runs on every
rank, interleaved over rounds (the project's timer: throughput, latency and host time, medians over
rounds, max over ranks):

- ``cublas``: ``torch.matmul`` of the per-rank GEMM (AG: the gathered ``[M, K]``).
- ``core``: fluxlite's GEMM core alone on the same problem (one rank's schedule, nothing waits).
- ``kernel``: the fused kernel with the op's schedule, every flag already set and the peers' data
  already in place: no producer, no alignment step, no communication.
- ``kernel+copy``: the same kernel while the copy engine moves the op's bytes beside it
  (:mod:`fluxlite.profile.limit`): the fused call without its waits.
- ``splits`` (GEMM-RS where a fused call runs the matmul consumer): that consumer's cuBLAS GEMMs,
  one per (chunk, split) in the schedule's order (``GemmReduceScatter.matmul_gemms`` in
  :mod:`fluxlite.ops.gemm_rs`), the peers' partials already in place: no count, no wait, no copy.
  ``splits+copy``: the same with the op's bytes moving beside them.
- ``limit``: cuBLAS with the same transfer beside it (the overlap limit).
- ``copy``: the transfer alone; ``nccl``: the collective alone.
- ``sequential``, ``fused``: fluxlite's ops; ``torch``: ``torch.ops.symm_mem``'s fused op.

So ``core/cublas`` is the core's cost, ``kernel/core`` the schedule's and waits' bookkeeping,
``kernel+copy/kernel`` the transfer's interference, and ``fused/kernel+copy`` what the protocol
(alignment, producer, real waits) adds. For the matmul consumer, ``splits/cublas`` is what cutting
the GEMM into splits costs, ``splits+copy/splits`` the transfer's interference and
``fused/splits+copy`` the protocol.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fluxlite  # noqa: E402
from fluxlite import schedule as sch  # noqa: E402
from fluxlite._cli import ArgumentParser, no_nvlink_multicast, positive  # noqa: E402
from fluxlite.epilogue import PLAIN  # noqa: E402
from fluxlite.fused import state_of  # noqa: E402
from fluxlite.kernels import ag_gemm as ag_kernel  # noqa: E402
from fluxlite.kernels import gemm_rs as rs_kernel  # noqa: E402
from fluxlite.kernels.gemm_core import default_config  # noqa: E402
from fluxlite.ops import AG, RS  # noqa: E402
from fluxlite.profile.cli import parse_shape, refuse_indivisible  # noqa: E402
from fluxlite.profile.presets import SHORT, Shape  # noqa: E402
from fluxlite.profile.run import TIMEOUT_S, add_limit_cases, init_ranks, op_case, rel_err  # noqa: E402
from fluxlite.timing import Timer, run_each_once, time_rounds  # noqa: E402
from fluxlite.workspace import get_workspace  # noqa: E402

SHAPES = ["ag:8192,8192,14336", "rs:8192,14336,8192", "ag:8192,8192,5120", "rs:8192,5120,8192",
          "ag:16384,8192,4096", "rs:16384,4096,8192", "ag:4096,8192,14336", "ag:8192,8192,5504",
          "rs:8192,5504,8192", "ag:6000,5000,7000", "rs:6000,7000,5000", "ag:2048,8192,7168"]
OPS = ("ag_gemm", "gemm_rs")  # the ops with a kernel case
NAMES = dict(gemm="cublas", comm="nccl", torch_symm_mem="torch")  # this script's names of the profiler's cases
CASES = ("cublas", "core", "kernel", "kernel+copy", "splits", "splits+copy", "limit", "copy", "nccl", "sequential",
         "fused", "torch")


def preset_flags(W: int, signature: tuple[int, ...], device) -> torch.Tensor:
    """A flag array whose parity-0 region has every ready and data flag set and every peer's signature
    equal to ``signature``: the kernel's waits all pass at their first look."""
    flags = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32)
    flags[: sch.region_slots(W)] = sch.SET
    for p in range(W):
        at = sch.signature_slot(W, 0, p)
        flags[at : at + sch.SIG_WORDS] = torch.tensor(signature, dtype=torch.int32)
    return flags.to(device)


def fused_plan(op, tp, device, x0: dict, config):
    """``(args, plan)`` of a fused call of ``op`` on inputs like ``x0``: the checked arguments and the
    plan that ``op.prepare`` makes for ``config`` (``None``: what a forced fused call runs)."""
    state = state_of(get_workspace(tp.group, device, timeout=TIMEOUT_S), TIMEOUT_S)
    args = op.check(x0["a"], x0["w"], None, group=tp.group, impl="fused", timeout=TIMEOUT_S, out=None)
    return args, op.prepare(state, args, config)


def kernel_case(shape: Shape, tp, device, dtype, x0: dict):
    """``(kernel, plan)``: ``kernel(x)`` launches the fused kernel of ``shape``'s op with the op's
    schedule (``plan``, for inputs like ``x0``, built for the kernel with the default config even where
    a fused call of ``shape`` runs the matmul consumer), its flags preset and the peers' data already
    in place (separate buffers, not the workspace's, which the fused calls use)."""
    W, M, K, N = tp.world_size, shape.M, shape.K, shape.N
    ag = shape.op == "ag_gemm"
    op = AG if ag else RS
    plan = fused_plan(op, tp, device, x0, default_config())[1]
    error = torch.zeros(16, dtype=torch.int32, device=device)
    call = torch.ones(1, dtype=torch.int32, device=device)
    common = dict(blocks=plan.blocks, tiles=plan.tiles, flags=preset_flags(W, plan.signature, device),
                  sig=plan.signature_dev, error=error, call=call, world_size=W, sig_base=sch.signature_slot(W, 0, 0),
                  timeout_s=TIMEOUT_S, config=plan.config, cache={})
    local_tiles = plan.sched.local_tiles(plan.num_n)
    mc = M // W
    if ag:
        gathered = torch.randn(M, K, device=device, dtype=dtype)

        def kernel(x):
            out = x["a"].new_empty(M, N)
            ag_kernel.launch(a_local=x["a"], gathered=gathered, weight=x["w"], out=out, bias=None, ep=PLAIN,
                             scale_local=None, scale_gathered=None, local_tiles=local_tiles, **common)
            return out
        return kernel, plan

    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32, device=device)
    recv = torch.randn(W, mc, N, device=device, dtype=dtype)
    partial = torch.empty(W, mc, N, device=device, dtype=dtype)

    def kernel(x):
        counters.zero_()
        out = x["a"].new_empty(mc, N)
        rs_kernel.launch(a=x["a"], weight=x["w"], out=out, bias=None, partial=partial, recv=recv,
                         peer_tiles=plan.tiles.shape[0] - local_tiles, counters=counters, rank=tp.rank, ep=PLAIN,
                         **common)
        return out
    return kernel, plan


def splits_case(shape: Shape, tp, device, dtype, x0: dict):
    """``splits(x)``: GEMM-RS's matmul consumer's GEMMs for ``shape`` (module docstring), or ``None``
    where a fused call of ``shape`` runs the Triton kernel instead."""
    args, plan = fused_plan(RS, tp, device, x0, None)
    if plan.consumer == "triton":
        return None
    W, mc, N = tp.world_size, plan.sched.chunk_rows, shape.N
    recv = torch.randn(W, mc, N, device=device, dtype=dtype)
    partial = torch.empty(W, mc, N, device=device, dtype=dtype)

    def splits(x):
        out = x["a"].new_empty(mc, N)
        RS.matmul_gemms(dataclasses.replace(args, a=x["a"], weight=x["w"]), plan, partial, recv, out,
                        count=lambda chunk, split: None, wait=lambda split: None)
        return out
    return splits


def cases(shape: Shape, timer: Timer, dtype, sets: int):
    """``(inputs, {case: fn(x)}, transfer, {case: why it failed})`` for one shape (module docstring):
    the profiler's cases (:func:`fluxlite.profile.run.op_case`, the limit and the copy) under this
    script's names, and the core, kernel and kernel+copy cases, and splits and splits+copy where the
    op runs the matmul consumer. Call ``transfer.close()`` when done (``None``: the transfer could not
    be built, and the cases that need it failed)."""
    tp, device = timer.tp, timer.device
    make, profiled = op_case(shape, tp, dtype, device)
    inputs = [make() for _ in range(sets)]
    kernel, plan = kernel_case(shape, tp, device, dtype, inputs[0])
    splits = splits_case(shape, tp, device, dtype, inputs[0]) if shape.op == "gemm_rs" else None
    transfer, failed = add_limit_cases(timer, shape, dtype, profiled)  # last: nothing here fails after it
    fns = {NAMES.get(name, name): fn for name, fn in profiled.items()}
    full = "gathered" if shape.op == "ag_gemm" else "a"  # the per-rank GEMM's input
    fns["core"] = lambda x: ag_kernel.gemm(x[full], x["w"], config=plan.config)
    fns["kernel"] = kernel
    if splits is not None:
        fns["splits"] = splits
    if transfer is None:
        failed["kernel+copy"] = failed["limit"]
    else:
        fns["kernel+copy"] = transfer.beside(kernel)
        if splits is not None:
            fns["splits+copy"] = transfer.beside(splits)
    if device.type != "cuda":
        fns.pop("torch", None)
    return inputs, {name: fns[name] for name in CASES if name in fns}, transfer, failed


def parse_args(argv=None):
    """Parse and check the arguments before the process group comes up: one line and exit 2 (from
    rank 0) when they are bad. The number of ranks is torchrun's ``WORLD_SIZE``."""
    p = ArgumentParser(prog="bench_overlap.py", description=__doc__.split("\n\n")[0])
    shape = functools.partial(parse_shape, ops=OPS)
    p.add_argument("--shapes", nargs="+", type=shape, metavar="[OP:]M,K,N",
                   help="ag:M,K,N, rs:M,K,N, or M,K,N for both (default: Llama-3-70B's and a few more)")
    p.add_argument("--rounds", type=positive(int), default=7, help="timed rounds per shape")
    p.add_argument("--sets", type=positive(int), default=2, help="input sets rotated over (L2)")
    p.add_argument("--out", default=None, help="JSON file (rank 0)")
    args = p.parse_args(argv)
    args.shapes = [s for group in (args.shapes or map(shape, SHAPES)) for s in group]
    refuse_indivisible(p, args.shapes, int(os.environ.get("WORLD_SIZE", "1")))
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    no_nvlink_multicast()
    tp, device = init_ranks()
    cuda = device.type == "cuda"  # else a smoke run on gloo ranks (kernels interpreted: tiny shapes)
    timer = Timer(tp, device)
    dtype = torch.bfloat16 if cuda else torch.float32
    rows = []
    for shape in args.shapes:
        op, M, K, N = SHORT[shape.op].lower(), shape.M, shape.K, shape.N
        t0 = time.perf_counter()
        inputs, fns, transfer, failed = cases(shape, timer, dtype, args.sets)
        try:
            outputs, more = run_each_once(timer, fns, inputs[0])
            failed.update(more)
            checked = [k for k in ("fused", "torch") if k in outputs and "sequential" in outputs]
            errs = dict(zip(checked, timer.max_over_ranks([rel_err(outputs[k], outputs["sequential"])
                                                           for k in checked])))
            del outputs
            times, batch = time_rounds(timer, fns, inputs, rounds=args.rounds, warmup=2, batch_ms=20.0, max_batch=30)
        finally:
            if transfer is not None:
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
            json.dump(dict(device=torch.cuda.get_device_name() if cuda else "cpu", world_size=tp.world_size,
                           torch=torch.__version__, triton=triton.__version__, date=time.strftime("%Y-%m-%d"),
                           command=" ".join(sys.argv), rows=rows), f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
