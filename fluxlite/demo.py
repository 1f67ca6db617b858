"""fluxlite's main job: AG-GEMM and GEMM-RS with every implementation, each checked against a
reference and timed, on whatever devices are present.

    torchrun --standalone --nproc-per-node 2 -m fluxlite.demo [--M M] [--K K] [--N N] [--iters I] [--dtype D]

Shapes follow a Megatron MLP block under sequence parallelism, with the problem ``M x K -> N``:

- AG-GEMM (column-parallel): ``a [M/W, K]`` per rank, ``weight [N/W, K]`` -> ``[M, N/W]``.
- GEMM-RS (row-parallel): ``a [M, K/W]`` per rank, ``weight [N, K/W]`` -> ``[M/W, N]``.

On GPUs (NCCL) the defaults are bf16 and 4096 x 8192 -> 8192; on CPU ranks (gloo) fp32 and
1024 x 1024 -> 1024, which finishes in seconds. Each implementation's output is compared with a
reference (float64 on CPU, float32 on GPU) and the job fails if any is off. Times: a warm-up, then
the median over iterations (CUDA events on GPU, ``perf_counter`` on CPU; ranks aligned by a barrier
before each call; the implementations interleaved), max over ranks. An implementation that raises
``NotImplementedError`` (or rejects the dtype) is shown as ``n/a``. Without torchrun it runs on a
1-rank group.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import fluxlite
from fluxlite._cli import ArgumentParser, comma_list, positive, threads_per_rank
from fluxlite._sequential import all_gather_rows
from fluxlite._validate import IMPLS as ALL_IMPLS
from fluxlite.group import free_local_port

IMPLS = ("sequential", "fused", "auto")  # the default
DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
          "float32": torch.float32, "fp32": torch.float32}
# Element-wise |out - ref| <= TOL * (|ref| + rms(ref)): a few roundings of the output dtype.
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check the arguments before any rank starts: sizes positive and divisible by the
    world size (torchrun's ``WORLD_SIZE``, else 1), the defaults resolved (GPU or CPU)."""
    p = ArgumentParser(prog="fluxlite.demo", description=__doc__.split("\n\n")[0])
    # Upper case first: under torchrun, its own parser takes --m and --n for abbreviations of its
    # options (--master-port, --nnodes, ...) and fails; the lower-case spellings work without torchrun.
    p.add_argument("--M", "--m", dest="m", type=positive(int), help="rows M of the whole problem (default: 4096 on GPU, 1024 on CPU)")
    p.add_argument("--K", "--k", dest="k", type=positive(int), help="reduction dim K (default: 8192 on GPU, 1024 on CPU)")
    p.add_argument("--N", "--n", dest="n", type=positive(int), help="output features N (default: 8192 on GPU, 1024 on CPU)")
    p.add_argument("--iters", type=positive(int), help="timed iterations per implementation (default: 20 on GPU, 10 on CPU)")
    p.add_argument("--warmup", type=positive(int, zero_ok=True), default=3, help="untimed iterations first (default: 3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--impls", type=comma_list(ALL_IMPLS), default=IMPLS,
                   help=f"comma-separated subset of {','.join(ALL_IMPLS)} (default: {','.join(IMPLS)})")
    args = p.parse_args(argv)
    args.impls = list(args.impls)
    args.cuda = cuda = torch.cuda.is_available()  # fluxlite.init puts the ranks on the GPUs when there are any
    for name, gpu, cpu in (("m", 4096, 1024), ("k", 8192, 1024), ("n", 8192, 1024)):
        if getattr(args, name) is None:
            setattr(args, name, gpu if cuda else cpu)
    args.iters = args.iters or (20 if cuda else 10)
    W = int(os.environ.get("WORLD_SIZE", "1"))
    bad = [f"{name} = {v}" for name, v in (("M", args.m), ("K", args.k), ("N", args.n)) if v % W]
    if bad:
        p.error(f"{', '.join(bad)} must be divisible by the number of ranks ({W})")
    return args


def _single_process_env() -> None:
    """Without torchrun: a 1-rank group on a free local port."""
    if "RANK" in os.environ:
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_local_port()))


class Timer:
    """Per-iteration wall time: CUDA events on GPU, ``perf_counter`` on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def align(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            if dist.get_backend() == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:  # ranks sharing a GPU (gloo serving CUDA): device_ids is NCCL's
                dist.barrier()
        else:
            dist.barrier()

    def time_once(self, fn) -> float:
        """Milliseconds of one call of ``fn``, ranks aligned first."""
        self.align()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def _max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _violation(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """max |out - ref| / (tol * (|ref| + rms(ref))), <= 1 passes; inf for non-finite output."""
    out = out.to(ref.dtype)
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    bound = TOL[dtype] * (ref.abs() + ref.pow(2).mean().sqrt())
    return float(((out - ref).abs() / bound).max())


def build_problems(tp, device: torch.device, M: int, K: int, N: int, dtype: torch.dtype):
    """The two ops' operands on this rank and their references (this rank's rows/columns)."""
    W, r = tp.world_size, tp.rank
    ref_dtype = torch.float64 if device.type == "cpu" else torch.float32
    gen = torch.Generator(device=device).manual_seed(1234 + r)
    shared = torch.Generator(device=device).manual_seed(99)  # the same on every rank (GEMM-RS bias)

    def randn(*shape, g=gen):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    # AG-GEMM: gather rows, keep this rank's N/W output features.
    a, w, b = randn(M // W, K), randn(N // W, K) / K**0.5, randn(N // W)
    gathered = all_gather_rows(a.to(ref_dtype), tp)
    ag_ref = torch.addmm(b.to(ref_dtype), gathered, w.to(ref_dtype).t())
    ag = dict(op="ag_gemm", args=(a, w, b), ref=ag_ref, flops=2.0 * M * K * (N // W))

    # GEMM-RS: this rank holds K/W of the reduction dim; the bias is added once, after the sum.
    a2, w2, b2 = randn(M, K // W), randn(N, K // W) / K**0.5, randn(N, g=shared)
    total = a2.to(ref_dtype) @ w2.to(ref_dtype).t()
    dist.all_reduce(total)
    rs_ref = total[r * (M // W) : (r + 1) * (M // W)] + b2.to(ref_dtype)
    rs = dict(op="gemm_rs", args=(a2, w2, b2), ref=rs_ref, flops=2.0 * M * (K // W) * N)
    return [ag, rs]


def run_problem(problem: dict, impls: list[str], timer: Timer, dtype, iters: int, warmup: int) -> list[dict]:
    """Check every impl once, then time them interleaved (iteration i of each impl back to back),
    so that a noisy neighbour or clock change hits all of them alike."""
    fn = getattr(fluxlite, problem["op"])
    args = problem["args"]
    device = timer.device
    results, runnable = {}, []
    for impl in impls:
        try:
            out = fn(*args, impl=impl)
        except (NotImplementedError, TypeError) as exc:  # raised on every rank, before any communication
            results[impl] = dict(impl=impl, status="n/a", note=str(exc).split(";")[0])
            continue
        fluxlite.synchronize()
        violation = _max_over_ranks(_violation(out, problem["ref"], dtype), device)
        results[impl] = dict(impl=impl, status="ok" if violation <= 1.0 else "MISMATCH", violation=violation)
        runnable.append(impl)
        del out
    for impl in runnable:
        for _ in range(warmup):
            fn(*args, impl=impl)
    times = {impl: [] for impl in runnable}
    for _ in range(iters):
        for impl in runnable:
            times[impl].append(timer.time_once(lambda: fn(*args, impl=impl)))
    fluxlite.synchronize()
    for impl in runnable:
        ms = _max_over_ranks(statistics.median(times[impl]), device)
        results[impl].update(ms=ms, tflops=problem["flops"] / (ms * 1e-3) / 1e12)
    return [dict(op=problem["op"], **results[impl]) for impl in impls]


def _table(rows: list[dict], title: str) -> str | None:
    """Print with rich when it is installed; else return plain text."""
    header = ["op", "impl", "median ms (max over ranks)", "TFLOP/s per rank", "vs sequential", "max err / tol", "check"]
    body = []
    for r in rows:
        if r["status"] == "n/a":
            body.append([r["op"], r["impl"], "n/a", "n/a", "n/a", "n/a", "n/a"])
            continue
        base = next((x for x in rows if x["op"] == r["op"] and x["impl"] == "sequential" and "ms" in x), None)
        speedup = f"{base['ms'] / r['ms']:.2f}x" if base else "-"
        body.append([r["op"], r["impl"], f"{r['ms']:.3f}", f"{r['tflops']:.3f}", speedup,
                     f"{r['violation']:.3f}", r["status"]])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in body]
        return "\n".join(lines)
    table = Table(title=title)
    for h in header:
        table.add_column(h)
    for row in body:
        table.add_row(*row)
    Console().print(table)
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    _single_process_env()
    tp = fluxlite.init()
    cuda = args.cuda
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    M, K, N, iters, impls = args.m, args.k, args.n, args.iters, args.impls
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if cuda else torch.float32)
    W = tp.world_size
    if not cuda:
        torch.set_num_threads(threads_per_rank())

    timer = Timer(device)
    rows = []
    for problem in build_problems(tp, device, M, K, N, dtype):
        rows += run_problem(problem, impls, timer, dtype, iters, args.warmup)

    if tp.rank == 0:
        where = torch.cuda.get_device_name(device) if cuda else f"CPU (torch threads per rank: {torch.get_num_threads()})"
        title = (f"fluxlite {fluxlite.__version__}: W={W} ranks on {where}, backend "
                 f"{dist.get_backend()}, {str(dtype).replace('torch.', '')}, M x K -> N = {M} x {K} -> {N}, "
                 f"median of {iters} after {args.warmup} warm-up")
        text = _table(rows, title)
        if text:
            print(text)
        for r in rows:
            if r["status"] == "n/a":
                print(f"  n/a: {r['op']} impl={r['impl']}: {r['note']}")
        sys.stdout.flush()
    failed = [f"{r['op']}/{r['impl']}" for r in rows if r["status"] == "MISMATCH"]
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    if failed:
        raise SystemExit(f"fluxlite.demo: outputs differ from the reference beyond tolerance: {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
