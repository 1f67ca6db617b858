r"""Time fluxlite's AG-GEMM and GEMM-RS against baselines from the same run, in three ways.

    torchrun --standalone --nproc-per-node 2 scripts/bench_ops.py --out bench_ops.json [--quick]
    torchrun --standalone --nproc-per-node 8 scripts/bench_ops.py --model llama3-70b --tokens 8192,16384

(NVLink multicast is off unless NCCL_NVLS_ENABLE etc. are set otherwise.) Exits 1 if a fluxlite impl
fails or is off by more than --max-rel-err; the baselines may fail (reported, then left out).

Shapes are ``op:M,K,N``: AG ``M`` gathered rows, ``K`` hidden, ``N`` local output columns; RS ``M``
rows, ``K`` local reduction size, ``N`` outputs. ``M`` is rounded up to a multiple of the world size.
The default shapes are Llama-3-70B's per-rank GEMMs at TP=2, whatever the world size;
``--model`` (and ``--tokens``) gives a preset's shapes at this run's world size (fluxlite-profile's).
Implementations: cublas (the per-rank GEMM alone), nccl (the collective alone), sequential,
torch_fused (torch.ops.symm_mem), fl_gemm (fluxlite's Triton GEMM alone), fused, fused_keep (AG,
return_gathered=True) and auto. Each fluxlite impl is checked once against a reference first.

Modes (docs/benchmarking.md), each a median over rounds, then the max over ranks; every
round times every impl once in each mode, in an order that rotates from round to round. The cases
and the timing are fluxlite-profile's (fluxlite/profile/run.py and fluxlite/timing.py), with fluxlite's own
GEMM alone and fused_keep added:
  throughput  n calls queued behind a torch.cuda._sleep, CUDA events around them, / n
  latency     barrier + sync, one call, sync: wall clock (reported) and CUDA events
  host        perf_counter around one call, behind a _sleep, no sync
Inputs rotate over --sets copies. Without CUDA it runs on gloo CPU ranks (a smoke test of the script). Derived: fused/cuBLAS, fused and auto speedup over sequential
(throughput and latency), host fused/cuBLAS, overlap (T_gemm + T_comm - T_fused) / min(T_gemm,
T_comm) and exposed comm T_fused - T_gemm (throughput times).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fluxlite  # noqa: E402
from fluxlite._cli import ArgumentParser, comma_list, no_nvlink_multicast, positive, positive_list  # noqa: E402
from fluxlite.kernels.ag_gemm import gemm as fl_gemm  # noqa: E402
from fluxlite.profile import cli as profile_cli  # noqa: E402
from fluxlite.profile.presets import PRESETS, SHORT, Shape, model_shapes  # noqa: E402
from fluxlite.profile.report import no_nan  # noqa: E402
from fluxlite.profile.run import TIMEOUT_S, init_ranks, op_case, rel_err  # noqa: E402
from fluxlite.timing import MODES, Timer, run_each_once, time_rounds  # noqa: E402

ANCHOR_AG = [(8192, 8192, 14336), (8192, 8192, 5120), (4096, 8192, 14336), (16384, 8192, 4096)]
BASELINES = ("cublas", "nccl", "torch_fused")  # failures here are tolerated; fluxlite's are not
REF = dict(sequential=None, torch_fused="sequential", fl_gemm="cublas", fused="sequential",
           fused_keep="sequential", auto="sequential")  # what each impl's output is checked against
NAMES = dict(gemm="cublas", comm="nccl", torch_symm_mem="torch_fused")  # this script's names of the profiler's
OPS = ("ag_gemm", "gemm_rs")


def default_shapes(W: int) -> list:
    """Llama-3-70B's four anchor shapes, then four more (large N, ragged m = 1000 rows per rank, large,
    small); RS uses the same problems with K and N swapped."""
    ag = ANCHOR_AG + [(2048, 8192, 7168), (1000 * W, 5120, 1376), (16384, 4096, 28672), (512, 8192, 8192)]
    return [("ag", s) for s in ag] + [("rs", (M, N, K)) for M, K, N in ag]


def case(op: str, shape, tp, dtype, device):
    """(make one input set, {impl: fn(input set) -> output}): the profiler's cases under this script's
    names, without decomposed, plus fluxlite's GEMM alone and (AG) fused with return_gathered."""
    make, impls = op_case(Shape("ag_gemm" if op == "ag" else "gemm_rs", *shape), tp, dtype, device)
    impls = {NAMES.get(name, name): fn for name, fn in impls.items() if name != "decomposed"}
    if device.type != "cuda":
        del impls["torch_fused"]
    gemm_input = "gathered" if op == "ag" else "a"
    impls["fl_gemm"] = lambda x: fl_gemm(x[gemm_input], x["w"])
    if op == "ag":
        impls["fused_keep"] = lambda x: fluxlite.ag_gemm(x["a"], x["w"], group=tp.group, impl="fused",
                                                         return_gathered=True, timeout=TIMEOUT_S)[0]
    return make, impls


def bench(op: str, shape, args, timer: Timer, progress: str) -> dict:
    M, K, N = shape
    make, impls = case(op, shape, timer.tp, args.dtype, timer.device)
    sets = [make() for _ in range(args.sets)]
    outs, failed = run_each_once(timer, impls, sets[0])
    checked = [n for n in impls if REF.get(n) in outs and n in outs]
    errs = dict(zip(checked, timer.max_over_ranks([rel_err(outs[n], outs[REF[n]]) for n in checked])))
    del outs
    times, batch = time_rounds(timer, impls, sets, rounds=args.rounds, warmup=args.warmup, batch_ms=args.batch_ms,
                               max_batch=args.max_batch, min_sleep_ms=args.sleep_ms)
    n, sleep_ms = batch["n"], batch["sleep_ms"]
    if args.rank0:
        print(f"{progress} {op} {M}x{K}->{N}: batch {n}, sleep {sleep_ms:.0f} ms, {len(sets)} input sets, "
              f"{args.rounds} rounds" + (f"; FAILED {sorted(failed)}" if failed else ""), flush=True)
    drained = [nm for nm in times if timer.cuda and times[nm]["enqueue"] > sleep_ms]  # the GPU may have waited

    def get(name, mode):
        return times.get(name, {}).get(mode, math.nan)

    g, c, f = get("cublas", "throughput"), get("nccl", "throughput"), get("fused", "throughput")
    derived = dict(
        fused_over_cublas=f / g, fl_gemm_over_cublas=get("fl_gemm", "throughput") / g,
        **{f"{impl}_speedup_{mode}": get("sequential", mode) / get(impl, mode)
           for impl in ("fused", "auto") for mode in ("throughput", "latency")},
        host_fused_over_cublas=get("fused", "host") / get("cublas", "host"),
        overlap_efficiency=(g + c - f) / min(g, c), exposed_comm_ms=f - g)
    if args.rank0:
        print(f"    fused/cuBLAS {derived['fused_over_cublas']:.3f}, fused vs sequential "
              f"{derived['fused_speedup_throughput']:.2f}x throughput, {derived['fused_speedup_latency']:.2f}x latency"
              + (f"; enqueue took longer than the sleep: {drained}" if drained else ""), flush=True)
    return dict(op=op, M=M, K=K, N=N, batch=n, sleep_ms=sleep_ms, host_sleep_ms=batch["host_sleep_ms"],
                sets=len(sets), rel_err=errs, failed=failed, enqueue_over_sleep=drained, times_ms=times,
                derived=derived)


def fluxlite_bad(row: dict, max_rel_err: float) -> list:
    """The fluxlite impls of a row that failed or whose output is off."""
    return [n for n in REF if n not in BASELINES and (n in row["failed"] or not row["rel_err"].get(n, 0.0) <= max_rel_err)]


def print_table(meta: dict, rows: list) -> None:
    print(f"\n{meta['device']} x{meta['world_size']}  torch {meta['torch']}  triton {meta['triton']}  "
          f"nccl {meta['nccl']}  {meta['git_commit']}  ({meta['rounds']} rounds; ms are throughput medians)")
    head = ("op", "M x K -> N", "cuBLAS", "NCCL", "seq", "fused", "f/cuBLAS", "fused tp", "auto tp", "fused lat",
            "auto lat", "host f/cB", "overlap", "exposed", "max err")
    print(" ".join(f"{h:>{16 if i == 1 else 9}}" for i, h in enumerate(head)))
    for r in rows:
        t, d = r["times_ms"], r["derived"]
        ms = [f"{t[k]['throughput']:.3f}" if k in t else "-" for k in ("cublas", "nccl", "sequential", "fused")]
        errs = list(r["rel_err"].values())
        err = math.nan if not errs or any(map(math.isnan, errs)) else max(errs)
        cells = (r["op"], f"{r['M']}x{r['K']}->{r['N']}", *ms, f"{d['fused_over_cublas']:.3f}",
                 *(f"{d[f'{i}_speedup_{m}']:.2f}x" for m in ("throughput", "latency") for i in ("fused", "auto")),
                 f"{d['host_fused_over_cublas']:.2f}", f"{d['overlap_efficiency']:.2f}", f"{d['exposed_comm_ms']:.3f}",
                 f"{err:.1e}" + ("!" if fluxlite_bad(r, meta["max_rel_err"]) else ""))
        print(" ".join(f"{c:>{16 if i == 1 else 9}}" for i, c in enumerate(cells)))
    print("tp/lat: speedup over sequential (sequential / impl) in throughput / latency mode; host f/cB: host time "
          "fused / cuBLAS; '!': a fluxlite impl failed or is off (JSON 'failed', 'rel_err')", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check the arguments before the process group comes up (one line and exit 2 from rank
    0 when they are bad); ``args.shapes``: ``[(op, (M, K, N))]`` to run at torchrun's ``WORLD_SIZE``."""
    p = ArgumentParser(prog="bench_ops.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", type=functools.partial(profile_cli.parse_shape, ops=OPS),
                   metavar="[OP:]M,K,N",
                   help="e.g. ag:8192,8192,14336 rs:8192,14336,8192, or M,K,N for both (default: the 4 anchor shapes "
                        "+ 4 more, per op)")
    p.add_argument("--model", choices=sorted(PRESETS),
                   help="a preset's layer shapes (forward and dgrad) at this run's world size, instead of the defaults")
    p.add_argument("--tokens", type=positive_list(int), default="8192",
                   help="with --model: comma list of token counts (sequence x batch)")
    p.add_argument("--ops", type=comma_list(("ag", "rs")), default="ag,rs",
                   help="comma list of ag, rs (filters the shapes)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16", help="fp32: CPU ranks only")
    p.add_argument("--rounds", type=positive(int), default=15,
                   help="rounds per shape (each times every impl in every mode)")
    p.add_argument("--quick", action="store_true", help="5 rounds, 1 warm-up")
    p.add_argument("--warmup", type=positive(int, zero_ok=True), default=3,
                   help="untimed calls per impl, shape and mode, at least 4 per input set unless 0")
    p.add_argument("--sets", type=positive(int), default=3, help="input sets rotated between calls")
    p.add_argument("--batch-ms", type=positive(float), default=20.0,
                   help="GPU work per throughput batch (sizes the batch)")
    p.add_argument("--max-batch", type=positive(int), default=30, help="most calls per throughput batch")
    p.add_argument("--sleep-ms", type=positive(float, zero_ok=True), default=25.0,
                   help="least _sleep ahead of a throughput batch")
    p.add_argument("--max-rel-err", type=positive(float), default=2e-2, help="exit 1 if a fluxlite impl is further off")
    p.add_argument("--out", default=None, help="write meta and rows as JSON here (rank 0; rewritten after each row)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup = 5, 1
    args.dtype = dict(bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32)[args.dtype]
    W = int(os.environ.get("WORLD_SIZE", "1"))
    chosen = [s for group in args.shapes or [] for s in group]
    if args.model:
        try:
            chosen += [s for tokens in args.tokens for s in model_shapes(args.model, W, tokens) if s.op in OPS]
        except ValueError as exc:  # names the size W does not divide
            p.error(str(exc))
    chosen = [(SHORT[s.op].lower(), (s.M, s.K, s.N)) for s in chosen] or default_shapes(W)
    args.shapes = [(op, (-(-M // W) * W, K, N)) for op, (M, K, N) in chosen if op in args.ops]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    no_nvlink_multicast()
    tp, device = init_ranks()
    args.rank0, cuda = tp.rank == 0, device.type == "cuda"
    torch.manual_seed(dist.get_rank())
    shapes = args.shapes
    timer = Timer(tp, device)
    meta = dict(profile_cli.run_environment(tp, device), dtype=str(args.dtype).replace("torch.", ""),
                command=" ".join(sys.argv), rounds=args.rounds, warmup=args.warmup, timeout_s=TIMEOUT_S,
                max_rel_err=args.max_rel_err, modes=list(MODES), complete=False,
                sleep_cycles_per_ms=timer.cycles_per_ms) if args.rank0 else {}
    rows = []
    for i, (op, shape) in enumerate(shapes):
        rows.append(bench(op, shape, args, timer, f"[{i + 1}/{len(shapes)}]"))
        if cuda:
            torch.cuda.empty_cache()
        if args.rank0 and args.out:
            meta["complete"] = i + 1 == len(shapes)
            with open(args.out, "w") as f:
                json.dump(no_nan(dict(meta=meta, rows=rows)), f, indent=1)
    bad = {f"{r['op']} {r['M']}x{r['K']}->{r['N']}": fluxlite_bad(r, args.max_rel_err) for r in rows}
    bad = {row: impls for row, impls in bad.items() if impls}
    if args.rank0:
        print_table(meta, rows)
        if bad:
            print(f"FAILED or off by more than {args.max_rel_err}: {bad}", flush=True)
    timer.align()
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
