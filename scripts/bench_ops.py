r"""Time fluxlite's AG-GEMM and GEMM-RS against baselines from the same run, in three ways.

    torchrun --standalone --nproc-per-node 2 scripts/bench_ops.py --out bench_ops.json [--quick]

(NVLink multicast is off unless NCCL_NVLS_ENABLE etc. are set otherwise.) Exits 1 if a fluxlite impl
fails or is off by more than --max-rel-err; the baselines may fail (reported, then left out).

Shapes are ``op:M,K,N``: AG ``M`` gathered rows, ``K`` hidden, ``N`` local output columns; RS ``M``
rows, ``K`` local reduction size, ``N`` outputs. ``M`` is rounded up to a multiple of the world size.
Implementations: cublas (the per-rank GEMM alone), nccl (the collective alone), sequential,
torch_fused (torch.ops.symm_mem), fl_gemm (fluxlite's Triton GEMM alone), fused, fused_keep (AG,
return_gathered=True) and auto. Each fluxlite impl is checked once against a reference first.

Modes (DESIGN.md "Performance method"), each a median over rounds, then the max over ranks; every
round times every impl once in each mode, in an order that rotates from round to round:
  throughput  n calls queued behind a torch.cuda._sleep, CUDA events around them, / n
  latency     barrier + sync, one call, sync: wall clock (reported) and CUDA events
  host        perf_counter around one call, behind a _sleep, no sync
Inputs rotate over --sets copies. Derived: fused/cuBLAS, fused and auto speedup over sequential
(throughput and latency), host fused/cuBLAS, overlap (T_gemm + T_comm - T_fused) / min(T_gemm,
T_comm) and exposed comm T_fused - T_gemm (throughput times).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.distributed as dist

# Never NVLink multicast on the shared machines (as scripts/gpu_suite.sh); read at NCCL / symm-mem init.
for _var, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_var, _value)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fluxlite  # noqa: E402
from fluxlite.kernels.ag_gemm import gemm as fl_gemm  # noqa: E402

ANCHOR_AG = [(8192, 8192, 14336), (8192, 8192, 5120), (4096, 8192, 14336), (16384, 8192, 4096)]
BASELINES = ("cublas", "nccl", "torch_fused")  # failures here are tolerated; fluxlite's are not
REF = dict(sequential=None, torch_fused="sequential", fl_gemm="cublas", fused="sequential",
           fused_keep="sequential", auto="sequential")  # what each impl's output is checked against
MODES = ("throughput", "latency", "latency_event", "host", "enqueue")
TIMEOUT_S = 30


def default_shapes(W: int) -> list:
    """ANCHORS.md's four, then four more (large N, ragged m = 1000 rows per rank, large, small);
    RS uses the same problems with K and N swapped, as ANCHORS.md does."""
    ag = ANCHOR_AG + [(2048, 8192, 7168), (1000 * W, 5120, 1376), (16384, 4096, 28672), (512, 8192, 8192)]
    return [("ag", s) for s in ag] + [("rs", (M, N, K)) for M, K, N in ag]


def parse_shape(text: str):
    try:
        op, dims = text.split(":")
        M, K, N = (int(v) for v in dims.split(","))
        assert op in ("ag", "rs") and min(M, K, N) > 0
    except (ValueError, AssertionError):
        raise argparse.ArgumentTypeError(f"expected ag:M,K,N or rs:M,K,N with positive sizes, got {text!r}")
    return op, (M, K, N)


def ag_case(M, K, N, W, dtype, group_name):
    """(make one input set, {impl: fn(input set) -> output}) for AG-GEMM."""
    def make():
        a = torch.randn(M // W, K, device="cuda", dtype=dtype)
        gathered = torch.empty(M, K, device="cuda", dtype=dtype)
        dist.all_gather_into_tensor(gathered, a)  # a_full: the real gathered input, so fl_gemm is checkable
        return dict(a=a, w=(torch.randn(N, K, device="cuda") / K**0.5).to(dtype), a_full=gathered.clone(),
                    gathered=gathered)

    def call(x, **kw):
        return fluxlite.ag_gemm(x["a"], x["w"], timeout=TIMEOUT_S, **kw)

    return make, {
        "cublas": lambda x: torch.matmul(x["a_full"], x["w"].t()),
        "nccl": lambda x: dist.all_gather_into_tensor(x["gathered"], x["a"]),
        "sequential": lambda x: call(x, impl="sequential"),
        "torch_fused": lambda x: torch.ops.symm_mem.fused_all_gather_matmul(x["a"], [x["w"].t()], 0, group_name)[1][0],
        "fl_gemm": lambda x: fl_gemm(x["a_full"], x["w"]),
        "fused": lambda x: call(x, impl="fused"),
        "fused_keep": lambda x: call(x, impl="fused", return_gathered=True)[0],
        "auto": lambda x: call(x, impl="auto"),
    }


def rs_case(M, K, N, W, dtype, group_name):
    """(make one input set, {impl: fn(input set) -> output}) for GEMM-RS."""
    def make():
        return dict(a=torch.randn(M, K, device="cuda", dtype=dtype),
                    w=(torch.randn(N, K, device="cuda") / K**0.5).to(dtype),
                    partial=torch.randn(M, N, device="cuda", dtype=dtype),
                    reduced=torch.empty(M // W, N, device="cuda", dtype=dtype))

    def call(x, impl):
        return fluxlite.gemm_rs(x["a"], x["w"], impl=impl, timeout=TIMEOUT_S)

    return make, {
        "cublas": lambda x: torch.matmul(x["a"], x["w"].t()),
        "nccl": lambda x: dist.reduce_scatter_tensor(x["reduced"], x["partial"]),
        "sequential": lambda x: call(x, "sequential"),
        "torch_fused": lambda x: torch.ops.symm_mem.fused_matmul_reduce_scatter(x["a"], x["w"].t(), "sum", 0, group_name),
        "fl_gemm": lambda x: fl_gemm(x["a"], x["w"]),
        "fused": lambda x: call(x, "fused"),
        "auto": lambda x: call(x, "auto"),
    }


def max_over_ranks(values: list) -> list:
    t = torch.tensor(values, dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x.float() - y.float()).norm() / y.float().norm()).item()


class Timer:
    """The three timing modes. ``cpm``: torch.cuda._sleep cycles per millisecond."""

    def __init__(self):
        self.dev = torch.cuda.current_device()
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.align()
        torch.cuda._sleep(100_000_000)  # ~50 ms: the clocks up, then calibrate
        self.start.record()
        torch.cuda._sleep(20_000_000)
        self.end.record()
        torch.cuda.synchronize()
        self.cpm = max_over_ranks([20_000_000 / self.start.elapsed_time(self.end)])[0]

    def align(self):
        torch.cuda.synchronize()
        dist.barrier(device_ids=[self.dev])
        torch.cuda.synchronize()

    def throughput(self, fn, sets, first, n, sleep_ms):
        """(GPU ms per call over ``n`` calls queued behind a sleep, host ms to enqueue them)."""
        self.align()
        torch.cuda._sleep(int(sleep_ms * self.cpm))
        t0 = time.perf_counter()
        self.start.record()
        for i in range(n):
            fn(sets[(first + i) % len(sets)])
        self.end.record()
        enqueue = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        return self.start.elapsed_time(self.end) / n, enqueue

    def latency(self, fn, x):
        """(wall ms of one call plus its sync, CUDA-event ms of the call), ranks aligned first."""
        self.align()
        t0 = time.perf_counter()
        self.start.record()
        fn(x)
        self.end.record()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3, self.start.elapsed_time(self.end)

    def host(self, fn, x, sleep_ms):
        """Host ms of one call, issued while the GPU sleeps."""
        self.align()
        torch.cuda._sleep(int(sleep_ms * self.cpm))
        t0 = time.perf_counter()
        fn(x)
        ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        return ms


def check(impls: dict, x: dict) -> tuple[dict, dict]:
    """Run each impl once; drop the ones that fail on any rank. Returns ({impl: rel err}, {impl: why})."""
    outs, failed = {}, {}
    for name, fn in list(impls.items()):
        why = ""
        try:
            outs[name] = fn(x)
            fluxlite.synchronize()  # a timeout a fused kernel recorded is raised here
            torch.cuda.synchronize()
        except Exception as exc:
            why = repr(exc)[:300]
        if max_over_ranks([float(bool(why))])[0]:
            failed[name] = why or "failed on another rank"
            del impls[name]
            outs.pop(name, None)
            if name not in BASELINES:
                try:  # a failed fused call poisons the workspace: start a fresh one
                    fluxlite.release_workspaces(timeout=TIMEOUT_S)
                except Exception as exc:
                    failed[name] += f"; release_workspaces: {exc!r}"[:200]
    names = [n for n in impls if REF.get(n) in outs]
    errs = max_over_ranks([rel_err(outs[n], outs[REF[n]]) for n in names]) if names else []
    return dict(zip(names, errs)), failed


def bench(op: str, shape, W: int, args, timer: Timer, progress: str) -> dict:
    M, K, N = shape
    make, impls = (ag_case if op == "ag" else rs_case)(M, K, N, W, args.dtype, dist.group.WORLD.group_name)
    sets = [make() for _ in range(args.sets)]
    errs, failed = check(impls, sets[0])
    names = list(impls)
    for i in range(args.warmup):
        for name in names:
            impls[name](sets[i % len(sets)])
    # Probe once to size the batch (>= --batch-ms of GPU work) and the sleeps (> the host's enqueue time).
    probe = max_over_ranks([v for n in names for v in (timer.latency(impls[n], sets[0])[1],
                                                       timer.host(impls[n], sets[0], 5.0))])
    gpu_ms, host_ms = max(probe[0::2]), max(probe[1::2])
    n = max(3, min(args.max_batch, math.ceil(args.batch_ms / gpu_ms)))
    sleep_ms = min(500.0, max(args.sleep_ms, 1.5 * n * host_ms + 2))
    host_sleep_ms = max(5.0, 3 * host_ms)
    if args.rank0:
        print(f"{progress} {op} {M}x{K}->{N}: batch {n}, sleep {sleep_ms:.0f} ms, {len(sets)} input sets, "
              f"{args.rounds} rounds" + (f"; FAILED {sorted(failed)}" if failed else ""), flush=True)

    samples = {name: {m: [] for m in MODES} for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            s, fn = samples[name], impls[name]
            tp, enq = timer.throughput(fn, sets, r, n, sleep_ms)
            wall, event = timer.latency(fn, sets[r % len(sets)])
            host = timer.host(fn, sets[(r + 1) % len(sets)], host_sleep_ms)
            for m, v in zip(MODES, (tp, wall, event, host, enq)):
                s[m].append(v)
    fluxlite.synchronize()
    med = max_over_ranks([statistics.median(samples[nm][m]) for nm in names for m in MODES])
    times = {nm: dict(zip(MODES, med[i * len(MODES):(i + 1) * len(MODES)])) for i, nm in enumerate(names)}
    drained = [nm for nm in names if times[nm]["enqueue"] > sleep_ms]  # the GPU may have waited on the host

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
    return dict(op=op, M=M, K=K, N=N, batch=n, sleep_ms=sleep_ms, host_sleep_ms=host_sleep_ms, sets=len(sets),
                rel_err=errs, failed=failed, enqueue_over_sleep=drained, times_ms=times, derived=derived)


def git_commit() -> str | None:
    try:
        run = lambda *cmd: subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10)  # noqa: E731
        sha = run("rev-parse", "--short", "HEAD").stdout.strip()
        return (sha + ("+dirty" if run("status", "--porcelain", "--untracked-files=no").stdout.strip() else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def no_nan(v):
    """NaN -> null, so the JSON is standard."""
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, list):
        return [no_nan(x) for x in v]
    return None if isinstance(v, float) and math.isnan(v) else v


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", type=parse_shape, metavar="OP:M,K,N",
                   help="e.g. ag:8192,8192,14336 rs:8192,14336,8192 (default: ANCHORS.md's 4 + 4 more, per op)")
    p.add_argument("--ops", default="ag,rs", help="comma list of ag, rs (filters the shapes)")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--rounds", type=int, default=15, help="rounds per shape (each times every impl in every mode)")
    p.add_argument("--quick", action="store_true", help="5 rounds, 1 warm-up")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per impl per shape")
    p.add_argument("--sets", type=int, default=3, help="input sets rotated between calls")
    p.add_argument("--batch-ms", type=float, default=20.0, help="GPU work per throughput batch (sizes the batch)")
    p.add_argument("--max-batch", type=int, default=30, help="most calls per throughput batch")
    p.add_argument("--sleep-ms", type=float, default=25.0, help="least _sleep ahead of a throughput batch")
    p.add_argument("--max-rel-err", type=float, default=2e-2, help="exit 1 if a fluxlite impl is further off")
    p.add_argument("--out", default=None, help="write meta and rows as JSON here (rank 0; rewritten after each row)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.warmup = 5, 1
    args.dtype = dict(bf16=torch.bfloat16, fp16=torch.float16)[args.dtype]

    fluxlite.init()
    W, args.rank0 = dist.get_world_size(), dist.get_rank() == 0
    try:  # torch_fused needs it on torch <= 2.11 (deprecated there); its failure only drops torch_fused
        import torch.distributed._symmetric_memory as symm_mem

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
    except Exception as exc:
        print(f"rank {dist.get_rank()}: enable_symm_mem_for_group failed: {exc!r}", flush=True)
    torch.manual_seed(dist.get_rank())
    ops = args.ops.split(",")
    shapes = [(op, (-(-M // W) * W, K, N)) for op, (M, K, N) in (args.shapes or default_shapes(W)) if op in ops]
    import triton

    meta = dict(device=torch.cuda.get_device_name(), world_size=W, torch=torch.__version__, triton=triton.__version__,
                nccl=".".join(map(str, torch.cuda.nccl.version())), dtype=str(args.dtype).replace("torch.", ""),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                git_commit=git_commit(), command=" ".join(sys.argv), rounds=args.rounds, warmup=args.warmup,
                timeout_s=TIMEOUT_S, max_rel_err=args.max_rel_err, modes=list(MODES), complete=False)
    timer = Timer()
    meta["sleep_cycles_per_ms"] = timer.cpm
    rows = []
    for i, (op, shape) in enumerate(shapes):
        rows.append(bench(op, shape, W, args, timer, f"[{i + 1}/{len(shapes)}]"))
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
    dist.barrier(device_ids=[timer.dev])
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
