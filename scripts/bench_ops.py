"""Benchmark fluxlite's fused AG-GEMM and GEMM-RS against baselines measured in the same run.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    torchrun --standalone --nproc-per-node 2 scripts/bench_ops.py --out bench_ops.json

For every shape (ANCHORS.md's by default) it times, with CUDA events after a warm-up (median over
iterations, then the max over ranks):

- ``cublas``: the per-rank GEMM alone (``torch.matmul``), no communication;
- ``nccl``: the collective alone (all-gather of ``a`` / reduce-scatter of the partial);
- ``sequential``: NCCL then cuBLAS (AG) or cuBLAS then NCCL (RS): ``impl="sequential"``;
- ``torch_fused``: ``torch.ops.symm_mem.fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``;
- ``fl_gemm``: fluxlite's Triton GEMM alone (the fused kernel with nothing to wait on);
- ``fl_fused``: fluxlite fused (``impl="fused"``);
- ``fl_*``: variants of fluxlite (other producers and transports, ``return_gathered``, configs), set
  through ``fluxlite._fused.TUNING`` and printed as ratios to ``fl_fused`` after the table.

and derives ``fused/cublas``, the speedup over sequential and over torch's fused op, the exposed
communication ``fused - cublas`` and the overlap efficiency
``(T_gemm + T_comm - T_fused) / min(T_gemm, T_comm)``.
Shapes are ``M x K -> N`` as in ANCHORS.md: AG ``M`` is the gathered row count, ``K`` the hidden
size, ``N`` the local output columns; RS ``M`` rows, ``K`` the local reduction size, ``N`` outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import fluxlite  # noqa: E402
from fluxlite import _fused, tune  # noqa: E402
from fluxlite.kernels import fused_gemm as kern  # noqa: E402

AG_SHAPES = [(8192, 8192, 14336), (8192, 8192, 5120), (4096, 8192, 14336), (16384, 8192, 4096)]
RS_SHAPES = [(8192, 14336, 8192), (8192, 5120, 8192), (4096, 14336, 8192), (16384, 4096, 8192)]


def time_all_ms(fns: dict, iters: int, warmup: int) -> dict:
    """Median CUDA-event time of each function, max over ranks.

    Interleaved: every round times each function once, so all of them see the same clock and
    thermal state (an H200 running GEMMs back to back sits at its power limit, and a function timed
    later in a long block would be penalised).
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    dist.barrier()
    events = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    medians = torch.tensor([statistics.median(s.elapsed_time(e) for s, e in events[name]) for name in fns],
                           device="cuda")
    dist.all_reduce(medians, op=dist.ReduceOp.MAX)
    return dict(zip(fns, medians.tolist()))


def tuned(fn, **knobs):
    """``fn`` run with fluxlite's internal tuning knobs set (a variant to compare), then restored."""
    def run():
        saved = {k: getattr(_fused.TUNING, k) for k in knobs}
        for k, v in knobs.items():
            setattr(_fused.TUNING, k, v)
        try:
            return fn()
        finally:
            for k, v in saved.items():
                setattr(_fused.TUNING, k, v)
    return run


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x.float() - y.float()).norm() / y.float().norm()).item()


def bench_ag(M: int, K: int, N: int, args) -> dict:
    W, group_name = dist.get_world_size(), dist.group.WORLD.group_name
    m = M // W
    a = torch.randn(m, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    a_full = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    gathered = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
    fns = {
        "cublas": lambda: torch.matmul(a_full, w.t()),
        "nccl": lambda: dist.all_gather_into_tensor(gathered, a),
        "sequential": lambda: fluxlite.ag_gemm(a, w, impl="sequential"),
        "torch_fused": lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [w.t()], 0, group_name),
        "fl_gemm": lambda: kern.gemm(a_full, w, config=cfg),
        "fl_fused": lambda: fluxlite.ag_gemm(a, w, impl="fused"),
        "fl_gemm_default": lambda: kern.gemm(a_full, w),
        "fl_fused_default": tuned(lambda: fluxlite.ag_gemm(a, w, impl="fused"), config=kern.GemmConfig()),
        # the pull path (the caller keeps the gathered input, as the layers do)
        "fl_fused_keep": lambda: fluxlite.ag_gemm(a, w, impl="fused", return_gathered=True)[0],
        # the previous default: pull, and the local rows copied into the gathered buffer first
        "fl_fused_copylocal": tuned(lambda: fluxlite.ag_gemm(a, w, impl="fused"), ag_push=False,
                                    ag_local_in_place=False),
        "fl_fused_sm": tuned(lambda: fluxlite.ag_gemm(a, w, impl="fused"), ag_producer="sm"),
        "fl_fused_s4": tuned(lambda: fluxlite.ag_gemm(a, w, impl="fused"), config=kern.GemmConfig(num_stages=4)),
    }
    cfg = tune.choose_config("ag_gemm", M=M, K=K, N=N, dtype=a.dtype, b_kmajor=False, device=a.device)
    seq = fluxlite.ag_gemm(a, w, impl="sequential")
    check = {name: rel_err(fns[name](), seq) for name in ("fl_fused", "fl_fused_keep", "fl_fused_copylocal",
                                                          "fl_fused_sm")}
    return _measure("ag", (M, K, N), fns, check, cfg, args)


def bench_rs(M: int, K: int, N: int, args) -> dict:
    W, group_name = dist.get_world_size(), dist.group.WORLD.group_name
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    partial = torch.randn(M, N, device="cuda").to(torch.bfloat16)
    reduced = torch.empty(M // W, N, device="cuda", dtype=torch.bfloat16)
    fns = {
        "cublas": lambda: torch.matmul(a, w.t()),
        "nccl": lambda: dist.reduce_scatter_tensor(reduced, partial),
        "sequential": lambda: fluxlite.gemm_rs(a, w, impl="sequential"),
        "torch_fused": lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, w.t(), "sum", 0, group_name),
        "fl_gemm": lambda: kern.gemm(a, w, config=cfg),
        "fl_fused": lambda: fluxlite.gemm_rs(a, w, impl="fused"),
        "fl_gemm_default": lambda: kern.gemm(a, w),
        "fl_fused_default": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), config=kern.GemmConfig()),
        "fl_fused_pull": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), rs_transport="pull"),
        "fl_fused_remote": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), rs_transport="remote"),
        "fl_fused_remote_now": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), rs_transport="remote",
                                     rs_defer_publish=False),
        "fl_fused_now": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), rs_defer_publish=False),
        "fl_fused_s4": tuned(lambda: fluxlite.gemm_rs(a, w, impl="fused"), config=kern.GemmConfig(num_stages=4)),
    }
    cfg = tune.choose_config("gemm_rs", M=M, K=K, N=N, dtype=a.dtype, b_kmajor=False, device=a.device)
    seq = fluxlite.gemm_rs(a, w, impl="sequential")
    check = {name: rel_err(fns[name](), seq) for name in ("fl_fused", "fl_fused_pull", "fl_fused_remote")}
    return _measure("rs", (M, K, N), fns, check, cfg, args)


def _measure(op: str, shape, fns, check: dict, cfg, args) -> dict:
    usable = {}
    for name, fn in fns.items():
        try:  # a baseline missing on this stack must not hide the others
            fn()
            usable[name] = fn
        except Exception as exc:
            if dist.get_rank() == 0:
                print(f"  {op} {shape} {name}: failed: {exc!r}", flush=True)
    times = {name: float("nan") for name in fns}
    times.update(time_all_ms(usable, args.iters, args.warmup))
    g, c, f = times["cublas"], times["nccl"], times["fl_fused"]
    row = dict(op=op, M=shape[0], K=shape[1], N=shape[2], times_ms=times, tuned_config=vars(cfg),
               fused_vs_seq_rel_err=check,
               fused_over_cublas=f / g, fl_gemm_over_cublas=times["fl_gemm"] / g,
               speedup_vs_sequential=times["sequential"] / f, speedup_vs_torch_fused=times["torch_fused"] / f,
               exposed_comm_ms=f - g, overlap_efficiency=(g + c - f) / min(g, c))
    if dist.get_rank() == 0:
        print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="ag,rs", help="comma list of ag, rs")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the rows as JSON here (rank 0)")
    args = parser.parse_args()

    fluxlite.init()
    import torch.distributed._symmetric_memory as symm_mem

    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in 2.11, still needed there
            symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
    torch.manual_seed(dist.get_rank())
    rows = []
    for op in args.ops.split(","):
        for shape in (AG_SHAPES if op == "ag" else RS_SHAPES):
            rows.append((bench_ag if op == "ag" else bench_rs)(*shape, args))
    if dist.get_rank() == 0:
        meta = dict(device=torch.cuda.get_device_name(), world_size=dist.get_world_size(),
                    torch=torch.__version__, triton=__import__("triton").__version__,
                    nccl=".".join(map(str, torch.cuda.nccl.version())), iters=args.iters, warmup=args.warmup)
        print_table(rows, meta)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(dict(meta=meta, rows=rows), f, indent=1)
    dist.barrier()
    fluxlite.release_workspaces()
    dist.destroy_process_group()


def print_table(rows, meta) -> None:
    print(f"\n{meta['device']} x{meta['world_size']}  torch {meta['torch']}  triton {meta['triton']}  nccl {meta['nccl']}")
    head = ("op", "M x K -> N", "cuBLAS", "NCCL", "seq", "torch", "flGEMM", "fused", "fused/cuBLAS",
            "flGEMM/cuBLAS", "vs seq", "vs torch", "overlap", "err")
    print("  ".join(f"{h:>10}" for h in head))
    for r in rows:
        t = r["times_ms"]
        cells = (r["op"], f"{r['M']}x{r['K']}->{r['N']}", *(f"{t[k]:.3f}" for k in
                 ("cublas", "nccl", "sequential", "torch_fused", "fl_gemm", "fl_fused")),
                 f"{r['fused_over_cublas']:.3f}", f"{r['fl_gemm_over_cublas']:.3f}",
                 f"{r['speedup_vs_sequential']:.2f}x", f"{r['speedup_vs_torch_fused']:.2f}x",
                 f"{r['overlap_efficiency']:.2f}", f"{max(r['fused_vs_seq_rel_err'].values()):.1e}")
        print("  ".join(f"{c:>10}" for c in cells))
    print("\nvariants, time / fl_fused (and the tuned config):")
    for r in rows:
        t = r["times_ms"]
        variants = "  ".join(f"{k[3:]}={t[k] / t['fl_fused']:.3f}" for k in t if k.startswith("fl_") and k != "fl_fused")
        c = r["tuned_config"]
        print(f"  {r['op']} {r['M']}x{r['K']}->{r['N']}: {variants}  "
              f"[{c['block_m']}x{c['block_n']}x{c['block_k']} w{c['num_warps']} s{c['num_stages']} g{c['group_m']}]")


if __name__ == "__main__":
    main()
