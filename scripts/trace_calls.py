#!/usr/bin/env python
"""A fused call's device timeline: kineto traces of calls queued back to back, and where one call's time goes.

    torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ar:8192,4096,8192 rs:8192,4096,8192

Shapes are per rank, as the profiler's (``ag:M,K,N``, ``rs:M,K,N``, ``ar:M,K,N``, or ``M,K,N`` for
all three). Per shape, every rank queues ``--calls`` forced fused calls behind a sleep under
``torch.profiler`` (CUDA activity) and prints, from its trace:

- the device events of one call (the last whole one: a fused call starts with its alignment
  kernel, or AG-GEMM's gather by the SMs, which aligns the call itself, so calls are cut there),
  each with its start from the call's start, its duration and its stream;
- the breakdown, medians over the whole calls (:func:`call_breakdown`)::

      period   one call's start to the next one's
      gemm     the GEMM kernels on the call's compute stream (the alignment kernel's): cuBLAS's,
               or fluxlite's fused kernel
      before   the call's start to its first GEMM (alignment, waits)
      between  the compute stream's time between its first GEMM's start and its last one's end that
               no GEMM fills (waits, gaps between launches)
      after    the last GEMM's end to the next call's start: what the call leaves after its compute
      copies   the transfers in the call, summed over streams: the copy engine's, and the SMs' copies of
               GEMM-AllReduce's gather end

- and, timed in the same process (CUDA events, the project's throughput mode), cuBLAS's GEMM of the
  same per-rank problem alone and the fused call: ``gemm / cublas`` is what splitting the GEMM
  costs, ``after / period`` what is left once the compute ends.

``--graph`` traces a user's CUDA graph of one fused call instead, replayed ``--calls`` times back to
back, and times the replay beside the eager call. Each replay has the capture's parity, so every
one after the first starts with a null call (:mod:`fluxlite.kernels.align`).

``--out DIR`` keeps each rank's Chrome trace (``<op>_<M>x<K>x<N>[_graph]_r<rank>.json``). On CPU ranks
there are no device events: the script says so and exits 0 (a smoke run of its own logic).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fluxlite  # noqa: E402
from fluxlite._cli import ArgumentParser, no_nvlink_multicast, positive  # noqa: E402
from fluxlite.profile.cli import parse_shape, refuse_indivisible  # noqa: E402
from fluxlite.profile.run import init_ranks, op_case  # noqa: E402
from fluxlite.timing import Timer  # noqa: E402

GEMM_MARKS = ("gemm", "nvjet", "xmma", "cutlass")  # kernel names of cuBLAS's GEMMs and fluxlite's fused kernels
WAIT_MARKS = ("wait",)  # fluxlite's bounded waits: split_wait
COPY_MARKS = ("memcpy", "gather_")  # the driver's copies; GEMM-AllReduce's gather end, copies by SMs
FIGURES = ("period", "gemm", "before", "between", "after", "copies")


def kind_of(event: dict) -> str:
    """``align``, ``gemm``, ``wait``, ``copy`` or ``other``, from a device event's category and name."""
    name = event["name"].lower()
    if event.get("cat") == "gpu_memcpy" or any(m in name for m in COPY_MARKS):
        return "copy"
    if "align_kernel" in name or "push_rows_kernel" in name:  # a call's first kernel: it aligns the call
        return "align"
    if any(m in name for m in GEMM_MARKS):
        return "gemm"
    if any(m in name for m in WAIT_MARKS):
        return "wait"
    return "other"


def device_events(trace: dict) -> list[dict]:
    """The device events of a Chrome trace (kernels, copies, memsets), by start time:
    ``{name, ts, dur, stream, kind}`` (µs)."""
    out = [dict(name=e["name"], ts=float(e["ts"]), dur=float(e["dur"]), stream=e.get("args", {}).get("stream"),
                kind=kind_of(e))
           for e in trace.get("traceEvents", [])
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return sorted(out, key=lambda e: e["ts"])


def call_starts(events: list[dict]) -> list[int]:
    """Where in ``events`` (by start) each call begins: its alignment kernel."""
    return [i for i, e in enumerate(events) if e["kind"] == "align"]


def call_breakdown(events: list[dict]) -> list[dict]:
    """One dict of :data:`FIGURES` (µs) per whole call in ``events`` (:func:`device_events`, by start).

    A call runs from one alignment kernel's start to the next one's; the events after the last
    alignment kernel make no whole call. The compute stream is the alignment kernel's. A call with
    no GEMM on it has ``gemm`` 0 and the rest NaN but ``period`` and ``copies``."""
    starts = call_starts(events)
    calls = []
    for a, b in zip(starts, starts[1:]):
        t0, t1, stream = events[a]["ts"], events[b]["ts"], events[a]["stream"]
        inside = events[a:b]
        gemms = [e for e in inside if e["kind"] == "gemm" and e["stream"] == stream]
        row = dict(period=t1 - t0, copies=sum(e["dur"] for e in inside if e["kind"] == "copy"),
                   gemm=sum(e["dur"] for e in gemms))
        if gemms:
            first, last = gemms[0]["ts"], max(e["ts"] + e["dur"] for e in gemms)
            row.update(before=first - t0, between=(last - first) - row["gemm"], after=t1 - last)
        else:
            row.update(before=float("nan"), between=float("nan"), after=float("nan"))
        calls.append(row)
    return calls


def medians(calls: list[dict]) -> dict:
    """The median of each figure over ``calls``."""
    return {f: statistics.median(c[f] for c in calls) for f in FIGURES}


def one_call_lines(events: list[dict]) -> list[str]:
    """The events of the last whole call, each ``start +duration stream name`` from the call's start."""
    starts = call_starts(events)
    if len(starts) < 2:
        return []
    a, b = starts[-2], starts[-1]
    t0 = events[a]["ts"]
    return [f"   {e['ts'] - t0:9.1f} +{e['dur']:8.1f}  s{e['stream']!s:<5} {e['name'][:60]}" for e in events[a:b]]


def parse_args(argv=None):
    p = ArgumentParser(prog="trace_calls.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", type=parse_shape, required=True, metavar="[ag:|rs:|ar:]M,K,N")
    p.add_argument("--calls", type=positive(int), default=6, help="fused calls traced per shape (at least 2)")
    p.add_argument("--warmup", type=positive(int), default=5, help="untimed calls first (capture their replays)")
    p.add_argument("--graph", action="store_true",
                   help="trace replays of a CUDA graph of one fused call (a user's graph), not eager calls")
    p.add_argument("--out", default=None, help="keep each rank's Chrome trace in this folder")
    args = p.parse_args(argv)
    if args.calls < 2:
        p.error(f"--calls: a whole call needs the next one's start, so at least 2, got {args.calls}")
    args.shapes = [s for group in args.shapes for s in group]
    refuse_indivisible(p, args.shapes, int(os.environ.get("WORLD_SIZE", "1")))
    return args


def trace_shape(shape, tp, device, args, out_dir: Path) -> list[str]:
    """The lines this rank prints for ``shape``."""
    cuda = device.type == "cuda"
    make, cases = op_case(shape, tp, torch.bfloat16 if cuda else torch.float32, device)
    x = make()
    fused, gemm = cases["fused"], cases["gemm"]
    for _ in range(args.warmup):
        fused(x), gemm(x)
    timed = [("cublas", gemm), ("fused", fused)]
    graphed = args.graph and cuda  # CPU ranks capture nothing: their smoke run makes eager calls
    if graphed:  # one call captured, replayed back to back: the same parity every time
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fused(x)
        fused = lambda _x: graph.replay()  # noqa: E731
        timed.append(("graph", fused))
    timer = Timer(tp, device)
    tp_ms = {name: timer.max_over_ranks([timer.throughput(fn, [x], 0, 20, 5.0)[0]])[0] for name, fn in timed}
    activities = [torch.profiler.ProfilerActivity.CUDA] if cuda else [torch.profiler.ProfilerActivity.CPU]
    timer.align()
    with torch.profiler.profile(activities=activities) as prof:
        if cuda:
            torch.cuda._sleep(1_000_000)  # the calls queue behind it: back to back on the device
        for _ in range(args.calls):
            fused(x)
        timer.sync()
    path = out_dir / f"{shape.op}_{shape.M}x{shape.K}x{shape.N}{'_graph' if graphed else ''}_r{tp.rank}.json"
    prof.export_chrome_trace(str(path))
    events = device_events(json.loads(path.read_text()))
    traced = "graph" if graphed else "fused"
    head = (f"== {shape.label} rank {tp.rank}: throughput ms cublas {tp_ms['cublas']:.4f} fused {tp_ms['fused']:.4f} "
            + (f"graph replay {tp_ms['graph']:.4f} " if graphed else "")
            + f"({traced} / cublas {tp_ms[traced] / tp_ms['cublas']:.3f}; traced: {traced})")
    calls = call_breakdown(events)
    if not calls:
        return [head, "   no whole fused call among the device events"
                + (" (CPU ranks record none)" if not cuda else f" ({len(events)} events)")]
    m = medians(calls)
    figures = "  ".join(f"{f} {m[f]:.1f}" for f in FIGURES)
    ratios = f"gemm / cublas {m['gemm'] / (1e3 * tp_ms['cublas']):.3f}, after / period {m['after'] / m['period']:.3f}"
    return [head, f"   us per call, medians of {len(calls)}: {figures}; {ratios}", *one_call_lines(events)]


def main(argv=None) -> int:
    args = parse_args(argv)
    no_nvlink_multicast()
    tp, device = init_ranks(torch_symm_mem=False)
    keep = Path(args.out) if args.out else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes:
            lines = trace_shape(shape, tp, device, args, keep or Path(tmp))
            for r in range(tp.world_size):  # rank by rank, so their lines do not interleave
                if r == tp.rank:
                    print("\n".join(lines), flush=True)
                dist.barrier()
            fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
