r"""fluxlite-profile: time every implementation of AG-GEMM and GEMM-RS per shape, and report the overlap.

    fluxlite-profile --model llama3-70b --tokens 8192 --nproc 2 --out prof/      # spawns 2 ranks
    torchrun --standalone --nproc-per-node 2 -m fluxlite.profile --shape 8192,8192,14336
    fluxlite-profile --from-json prof/profile.json --out prof/                   # re-draw the outputs

Shapes are per rank, ``M×K→N`` as in ANCHORS.md: ``ag:M,K,N`` (AG-GEMM: M gathered rows, K hidden,
N local output columns), ``rs:M,K,N`` (GEMM-RS: M rows, K local reduction size, N outputs), or
``M,K,N`` for both. ``--model`` derives the shapes of a preset's QKV, proj, fc1 and fc2, forward
and backward (fluxlite/profile/presets.py lists them and says how to add one).

With ``--nproc N`` it spawns its own ranks: one per GPU when there are N GPUs, else gloo CPU
ranks; the default is one per visible GPU where there are two or more (else, or with ``--device
cpu``, 2 CPU ranks). Under torchrun it uses torchrun's ranks. It writes ``profile.json``,
``profile.csv`` and ``profile.png`` to ``--out`` and prints a table. ``--tune`` also measures what
``impl="auto"`` should run for each shape and fills the dispatch cache (fluxlite/dispatch.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

import torch

from .presets import OPS, PRESETS, Shape, model_shapes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def parse_shape(text: str) -> list[Shape]:
    op, _, dims = text.rpartition(":")
    try:
        M, K, N = (int(v) for v in dims.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M,K,N or ag:M,K,N or rs:M,K,N (positive integers), got {text!r}")
    ops = {"": OPS, "ag": ("ag_gemm",), "rs": ("gemm_rs",)}.get(op)
    if ops is None or min(M, K, N) < 1:
        raise argparse.ArgumentTypeError(f"expected M,K,N or ag:M,K,N or rs:M,K,N (positive integers), got {text!r}")
    return [Shape(o, M, K, N) for o in ops]


def _positive(kind):
    def parse(text: str):
        v = kind(text)
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return v
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fluxlite-profile", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="[OP:]M,K,N",
                   help="a shape to profile (repeatable)")
    p.add_argument("--model", choices=sorted(PRESETS), help="profile a preset's layer shapes")
    p.add_argument("--tp", type=_positive(int), help="tensor-parallel size of --model (default: the world size)")
    p.add_argument("--tokens", type=_positive(int), default=8192, help="tokens (sequence x batch) of --model")
    p.add_argument("--ops", default="ag,rs", help="comma list of ag, rs: which ops to keep")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default: bf16 on GPUs, fp32 on CPU")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--nproc", type=_positive(int),
                   help="ranks to spawn when not under torchrun (default: one per GPU if 2+, else 2 CPU ranks)")
    p.add_argument("--rounds", type=_positive(int), default=15, help="timed rounds per shape")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per implementation per shape")
    p.add_argument("--sets", type=_positive(int), default=3, help="input sets rotated between calls")
    p.add_argument("--batch-ms", type=_positive(float), default=20.0, help="device work per throughput batch")
    p.add_argument("--tune", action="store_true", help="measure auto's choice for every shape (fills the cache)")
    p.add_argument("--out", type=Path, default=Path("fluxlite-profile"), help="folder for JSON, CSV and PNG")
    p.add_argument("--from-json", type=Path, help="re-write the table, CSV and PNG of an earlier profile.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check everything that can be checked before any rank starts."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.from_json:
        return args
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.nproc is None:
        args.nproc = gpus if gpus >= 2 and args.device != "cpu" else 2
    world = int(os.environ["WORLD_SIZE"]) if _under_torchrun() else args.nproc
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world)) if _under_torchrun() else world
    if args.device == "auto":
        args.device = "cuda" if gpus and (gpus >= local or _under_torchrun()) else "cpu"
    if args.device == "cuda" and local > gpus:
        p.error(f"{local} ranks on this host need as many GPUs, but {gpus} are visible; use fewer ranks or --device cpu")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.device == "cuda" and args.dtype == "fp32":
        p.error("--dtype fp32 runs on CPU only (fluxlite's fused GPU path is bf16/fp16)")
    ops = args.ops.split(",")
    if not set(ops) <= {"ag", "rs"}:
        p.error(f"--ops must be a comma list of ag, rs, got {args.ops!r}")
    shapes = [s for group in args.shape for s in group]
    if args.model:
        tp = args.tp or world
        if tp != world:
            p.error(f"--tp {tp} must equal the number of ranks ({world})")
        try:
            shapes += model_shapes(args.model, tp, args.tokens)
        except ValueError as exc:
            p.error(str(exc))
    if not shapes:
        p.error("give --shape M,K,N (repeatable) or --model NAME")
    for s in shapes:
        if s.M % world:
            p.error(f"shape {s.label}: M ({s.M}) must be divisible by the number of ranks ({world})")
    args.shapes = [s for s in shapes if {"ag_gemm": "ag", "gemm_rs": "rs"}[s.op] in ops]
    args.world_size = world
    return args


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        def git(*cmd):
            return subprocess.run(["git", *cmd], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        sha = git("rev-parse", "--short", "HEAD")
        return (sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _meta(args, tp) -> dict:
    import triton

    import fluxlite

    cuda = args.device == "cuda"
    return dict(device=torch.cuda.get_device_name() if cuda else "cpu", world_size=tp.world_size,
                backend=str(torch.distributed.get_backend(tp.group)), dtype=args.dtype, torch=torch.__version__,
                triton=triton.__version__, fluxlite=fluxlite.__version__,
                nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                git_commit=git_commit(), command=" ".join(["fluxlite-profile", *sys.argv[1:]]),
                rounds=args.rounds, warmup=args.warmup, sets=args.sets, batch_ms=args.batch_ms, tune=args.tune)


def profile_on_this_rank(args) -> None:
    """Every rank: time each shape; rank 0 prints the table and writes the files."""
    import fluxlite

    from . import report
    from .run import enable_torch_symm_mem, profile_shape
    from ..timing import Timer

    tp = fluxlite.init("nccl" if args.device == "cuda" else "gloo")
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // tp.world_size))
    else:
        enable_torch_symm_mem(tp)
    torch.manual_seed(1234 + tp.rank)
    timer = Timer(tp, device)
    rows = []
    shapes = args.shapes
    if tp.rank == 0 and not args.no_progress:
        from tqdm import tqdm

        shapes = tqdm(shapes, desc="fluxlite-profile", unit="shape", file=sys.stderr, dynamic_ncols=True)
    for shape in shapes:
        rows.append(profile_shape(timer, shape, dtype=DTYPES[args.dtype], rounds=args.rounds, warmup=args.warmup,
                                  sets=args.sets, batch_ms=args.batch_ms, tune=args.tune))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if tp.rank == 0:
        meta = _meta(args, tp)
        print(report.format_table(meta, rows), flush=True)
        paths = report.write_all(args.out, meta, rows)
        print("wrote " + ", ".join(map(str, paths)), flush=True)
    timer.align()
    fluxlite.release_workspaces()
    torch.distributed.destroy_process_group()


def _spawned_rank(rank: int, args, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(args.world_size), LOCAL_WORLD_SIZE=str(args.world_size))
    profile_on_this_rank(args)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        from . import report

        meta, rows = report.read_json(args.from_json)
        print(report.format_table(meta, rows))
        print("wrote " + ", ".join(map(str, report.write_all(args.out, meta, rows))))
        return 0
    if _under_torchrun():
        profile_on_this_rank(args)
        return 0
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(_spawned_rank, args=(args, port), nprocs=args.world_size, join=True)
    except mp.ProcessRaisedException as exc:
        print(f"fluxlite-profile: error: a rank failed: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    return 0
