r"""fluxlite-profile: time every implementation of AG-GEMM and GEMM-RS per shape, and report the overlap.

    fluxlite-profile --model llama3-70b --tokens 8192 --nproc 2 --out prof/      # spawns 2 ranks
    torchrun --standalone --nproc-per-node 2 -m fluxlite.profile --shape 8192,8192,14336
    fluxlite-profile --from-json prof/profile.json --out prof/                   # re-draw the outputs

Shapes are per rank, ``M×K→N``: ``ag:M,K,N`` (AG-GEMM: M gathered rows, K hidden, N local output
columns), ``rs:M,K,N`` (GEMM-RS: M rows, K local reduction size, N outputs), or ``M,K,N`` for both.
``--model`` derives the shapes of a preset's QKV, proj, fc1 and fc2, forward and backward
(fluxlite/profile/presets.py lists them and says how to add one).

Besides fluxlite's implementations it times, in the same rounds, the GEMM alone, the collective
alone, the op's bytes moved by the copy engine alone ("copy") and the limit: the GEMM while the copy
engine moves those bytes beside it, the least an overlapped op can cost on this hardware. The
efficiency of an implementation is (T_seq - T_impl) / (T_seq - T_limit): the share of the
communication the hardware lets it hide that it hides (1: all, 0: none; '-' where sequential is
within noise of the limit, so there is nothing to hide).

With ``--nproc N`` it spawns its own ranks: one per GPU when there are N GPUs, else gloo CPU
ranks; the default is one per visible GPU where there are two or more (else, or with ``--device
cpu``, 2 CPU ranks). Under torchrun it uses torchrun's ranks. It writes ``profile.json``,
``profile.csv`` and ``profile.png`` to ``--out`` and prints a table; the JSON and CSV are rewritten
after every shape. Ctrl-C, SIGTERM or ``--time-limit`` stop it early: it writes the shapes measured
so far (marked partial) and exits with 130, 143 or 124; a profiler killed outright takes the ranks
it spawned with it (Linux). ``--tune`` also measures what
``impl="auto"`` should run for each shape and fills the dispatch cache (fluxlite/dispatch.py).

CPU ranks only exercise the profiler's protocol: their times say nothing about GPU performance.
On CPU the default rounds and warm-up are cut, and a run estimated at more than a minute of
matmuls is refused unless ``--time-limit`` bounds it. Bad arguments give one line and exit status
2 (under torchrun, from rank 0; torchrun then adds its own report of the failed worker).
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .._cli import ArgumentParser, comma_list, on_rank_0, positive, threads_per_rank
from .presets import OPS, PRESETS, SHORT, Shape, model_shapes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CHOSEN = ("sequential", "decomposed", "fused", "torch_symm_mem", "auto")  # what --impls picks from
GEMM_CASES = ("gemm", "limit", "sequential")  # always timed, each with a full GEMM per call
DEFAULTS = {"cuda": dict(rounds=15, warmup=3, sets=3), "cpu": dict(rounds=2, warmup=0, sets=2)}
CPU_GFLOPS_PER_THREAD = 25.0  # a fp32 matmul rate of one core with a copy thread beside it (28 measured on an EPYC)
CPU_BUDGET_S = 60.0
EXIT_TIME_LIMIT = 124  # as timeout(1); a signal exits with 128 + its number
SPAWN_GRACE_S = 30.0  # how long the other ranks get to finish (rank 0: to write) once one has exited


def parse_shape(text: str, ops: tuple[str, ...] = OPS) -> list[Shape]:
    """``OP:M,K,N`` as the shape of one of ``ops`` (``OP``: its short name, lower case: ag, rs, ar),
    ``M,K,N`` as the shapes of them all."""
    bad = argparse.ArgumentTypeError(
        f"expected M,K,N or {'|'.join(SHORT[o].lower() for o in ops)}:M,K,N (positive integers), got {text!r}")
    op, _, dims = text.rpartition(":")
    try:
        M, K, N = (int(v) for v in dims.split(","))
    except ValueError:
        raise bad from None
    chosen = {"": ops, **{SHORT[o].lower(): (o,) for o in ops}}.get(op)
    if chosen is None or min(M, K, N) < 1:
        raise bad
    return [Shape(o, M, K, N) for o in chosen]


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="fluxlite-profile", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="[OP:]M,K,N",
                   help="a shape to profile (repeatable)")
    p.add_argument("--model", choices=sorted(PRESETS), help="profile a preset's layer shapes")
    p.add_argument("--tp", type=positive(int), help="tensor-parallel size of --model (default: the world size)")
    p.add_argument("--tokens", type=positive(int), default=8192, help="tokens (sequence x batch) of --model")
    p.add_argument("--ops", type=comma_list(("ag", "rs", "ar")), default=("ag", "rs", "ar"),
                   help="comma list of ag, rs, ar (GEMM-AllReduce: the layers without sequence parallelism): "
                        "which ops to keep")
    p.add_argument("--impls", type=comma_list(CHOSEN),
                   help=f"comma list of {', '.join(CHOSEN)} (default: all; torch_symm_mem on CUDA only). The GEMM, "
                        "the collective, the copy, the limit and sequential are always timed: the figures need them")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default: bf16 on GPUs, fp32 on CPU")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the ranks run (default: GPUs when there are enough, else CPU)")
    p.add_argument("--nproc", type=positive(int),
                   help="ranks to spawn when not under torchrun (default: one per GPU if 2+, else 2 CPU ranks)")
    p.add_argument("--rounds", type=positive(int), help="timed rounds per shape (default: 15 on GPUs, 2 on CPU)")
    p.add_argument("--warmup", type=positive(int, zero_ok=True),
                   help="untimed calls per implementation, shape and mode, at least 4 per input set unless 0 "
                        "(default: 3 on GPUs, 0 on CPU)")
    p.add_argument("--sets", type=positive(int), help="input sets rotated between calls (default: 3 on GPUs, 2 on CPU)")
    p.add_argument("--batch-ms", type=positive(float), default=20.0, help="device work per throughput batch")
    p.add_argument("--time-limit", type=positive(float), metavar="SECONDS",
                   help="stop after the shape running when this many seconds have passed, write the shapes "
                        f"measured, exit {EXIT_TIME_LIMIT}")
    p.add_argument("--tune", action="store_true", help="measure auto's choice for every shape (fills the cache)")
    p.add_argument("--out", type=Path, default=Path("fluxlite-profile"), help="folder for JSON, CSV and PNG")
    p.add_argument("--from-json", type=Path, help="re-write the table, CSV and PNG of an earlier profile.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (a line per shape instead)")
    return p


def _under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and check everything that can be checked before any rank starts (exit 2 if bad)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out must be a folder, but {args.out} is a file")
    if args.from_json:
        from . import report

        try:
            args.loaded = report.read_json(args.from_json)
        except ValueError as exc:
            p.error(f"--from-json: {exc}")
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
    if args.device == "cpu" and "torch_symm_mem" in (args.impls or ()):
        p.error("--impls: torch_symm_mem runs on CUDA only")
    args.impls = args.impls or tuple(i for i in CHOSEN if args.device == "cuda" or i != "torch_symm_mem")
    for name, value in DEFAULTS[args.device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
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
    refuse_indivisible(p, shapes, world)
    args.shapes = [s for s in shapes if SHORT[s.op].lower() in args.ops]
    args.world_size = world
    if args.device == "cpu" and args.time_limit is None:
        _refuse_long_cpu_runs(p, args, threads_per_rank(local))
    return args


def refuse_indivisible(p: argparse.ArgumentParser, shapes: list[Shape], world: int) -> None:
    """A bad argument: a shape whose M rows the ranks cannot split (GEMM-AllReduce's need not split)."""
    for s in shapes:
        if s.op != "gemm_ar" and s.M % world:
            p.error(f"shape {s.label}: M ({s.M}) must be divisible by the number of ranks ({world})")


def _refuse_long_cpu_runs(p: argparse.ArgumentParser, args: argparse.Namespace, threads: int) -> None:
    """A CPU run estimated at more than :data:`CPU_BUDGET_S` is a bad argument: its times would mean
    nothing for performance anyway. The error says what fits."""
    seconds = cpu_estimate_s(args, threads)
    if seconds > CPU_BUDGET_S:
        smaller = f" (e.g. --tokens {_fitting_tokens(args, seconds)})" if args.model else ""
        p.error(f"on {args.world_size} CPU ranks these {len(args.shapes)} shapes would take about {seconds:.0f} s of "
                f"matmuls, and CPU times only exercise the profiler's protocol: use smaller shapes{smaller}, or bound "
                "the run with --time-limit SECONDS")


def cpu_estimate_s(args: argparse.Namespace, threads: int) -> float:
    """The seconds a CPU run takes per rank, estimated from the matmul FLOPs of every call it makes
    (:func:`fluxlite.profile.run.profile_shape`: one checked call, the warm-up, a 2-call probe and
    3 calls per round of every case that runs a GEMM) at :data:`CPU_GFLOPS_PER_THREAD` per thread."""
    cases = len(GEMM_CASES) + len(set(args.impls) - {"sequential"}) + (3 if args.tune else 0)
    calls = 1 + args.warmup + 2 + 3 * args.rounds
    return sum(s.flops for s in args.shapes) * cases * calls / (CPU_GFLOPS_PER_THREAD * 1e9 * threads)


def _fitting_tokens(args: argparse.Namespace, seconds: float) -> int:
    """Fewer tokens (``args.tokens`` halved, a multiple of the ranks) at which ``args.model`` fits
    :data:`CPU_BUDGET_S`, the FLOPs scaling with the tokens."""
    W, tokens = args.world_size, args.tokens
    while tokens > W and seconds > CPU_BUDGET_S:
        fewer = max(W, tokens // 2 // W * W)
        tokens, seconds = fewer, seconds * fewer / tokens
    return tokens


def git_commit() -> str | None:
    """fluxlite's own git commit (``+dirty`` if its tracked files changed) when the imported
    package sits in a git checkout of fluxlite; ``None`` otherwise (an installed copy), whatever the
    current directory or an enclosing repository is."""
    import fluxlite

    package = Path(fluxlite.__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # no GIT_DIR from the caller

    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=package, env=env, capture_output=True, text=True, timeout=10)
    try:
        top = git("rev-parse", "--show-toplevel").stdout.strip()
        if not top or Path(top).resolve() != package.parent or git("ls-files", "--error-unmatch", "__init__.py").returncode:
            return None
        sha = git("rev-parse", "--short", "HEAD").stdout.strip()
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".").stdout.strip()
        return (sha + ("+dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def run_environment(tp, device: torch.device) -> dict:
    """What a run's figures depend on besides its arguments: the device, world size and backend, the
    versions of torch, triton, fluxlite and NCCL (CUDA), the date (UTC) and fluxlite's git commit."""
    import triton

    import fluxlite

    cuda = device.type == "cuda"
    return dict(device=torch.cuda.get_device_name(device) if cuda else "cpu", world_size=tp.world_size,
                backend=str(torch.distributed.get_backend(tp.group)), torch=torch.__version__,
                triton=triton.__version__, fluxlite=fluxlite.__version__,
                nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                git_commit=git_commit())


def _meta(args, tp, device: torch.device) -> dict:
    return dict(run_environment(tp, device), dtype=args.dtype, command=" ".join(["fluxlite-profile", *sys.argv[1:]]),
                rounds=args.rounds, warmup=args.warmup, sets=args.sets, batch_ms=args.batch_ms, tune=args.tune,
                impls=list(args.impls), time_limit=args.time_limit, shapes=len(args.shapes), stopped=None)


class Interrupted(KeyboardInterrupt):
    """A signal stopped the run (a ``KeyboardInterrupt``, so no ``except Exception`` swallows it)."""


class _Signals:
    """SIGINT and SIGTERM raise :class:`Interrupted` once, in the main thread, but never inside a
    timed call: there the exception would leave a fused call's producer thread (or the limit's copy
    thread) writing into tensors that are then freed, so it waits until the call returns. Nor
    where Python would drop it (a weakref callback or a ``__del__`` that the signal interrupted):
    it is raised at the next call instead. Later signals, and any once :meth:`disarm` ends the
    measuring, are ignored, so that rank 0's writing of the results is not cut short;
    :meth:`restore` gives the signals back their defaults."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.armed, self.in_call, self.pending = True, False, False
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.name is None and self.armed:  # disarmed: the measuring is over, the results go out whole
            self.name = signal.Signals(signum).name
            self.pending = True
            if not self.in_call and not _drops_exceptions(frame):
                self.pending = False
                raise Interrupted(self.name)

    def _raise_pending(self) -> None:
        """Raise the signal's :class:`Interrupted` if it waits (for a call to return, or for a place
        where Python does not drop it)."""
        if self.pending and self.armed:
            self.pending = False
            raise Interrupted(self.name)

    def wrap(self, fn):
        """``fn`` with a signal that arrives during a call raised when it returns."""
        def call(x):
            self._raise_pending()
            self.in_call = True
            try:
                return fn(x)
            finally:
                self.in_call = False
                self._raise_pending()
        return call

    def disarm(self) -> None:
        self.armed = self.pending = False

    def restore(self) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def exit_status(self) -> int:
        return 128 + signal.Signals[self.name].value


def _drops_exceptions(frame) -> bool:
    """Whether an exception raised at ``frame`` would be printed and dropped rather than reach the
    run: inside a ``__del__`` or a weakref callback (the garbage collector calls both)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename.endswith("weakref.py"):
            return True
        frame = frame.f_back
    return False


def _measure(args, timer, rows: list[dict], after_each: Callable, wrap: Callable) -> str | None:
    """Append the row of each of ``args.shapes`` to ``rows``, calling ``after_each(i, shape, seconds)``
    after each; returns why it stopped early (``--time-limit``), or ``None``. Collective."""
    from .run import profile_shape

    start = time.monotonic()
    for i, shape in enumerate(args.shapes):
        rows.append(profile_shape(timer, shape, dtype=DTYPES[args.dtype], rounds=args.rounds, warmup=args.warmup,
                                  sets=args.sets, batch_ms=args.batch_ms, tune=args.tune, impls=args.impls, wrap=wrap))
        if timer.cuda:
            torch.cuda.empty_cache()
        after_each(i, shape, time.monotonic() - start)
        # The ranks agree on the elapsed time (the max), so that all of them stop after the same shape.
        last = i + 1 == len(args.shapes)
        if args.time_limit and not last and timer.max_over_ranks([time.monotonic() - start])[0] > args.time_limit:
            return f"--time-limit {args.time_limit:g} s"
    return None


def profile_on_this_rank(args) -> int:
    """Every rank: time each shape; rank 0 prints the table and writes the files (the JSON and CSV
    after every shape too). Stopped early (a signal, ``--time-limit``, an error), rank 0 still
    writes what was measured, marked partial. Returns the exit status; an error is re-raised."""
    signals = _Signals()  # first: a signal while the group comes up stops the run cleanly too
    try:
        return _profile(args, signals)
    except Interrupted:  # before the first shape: nothing to write
        signals.restore()
        return signals.exit_status()


def _profile(args, signals: _Signals) -> int:
    import fluxlite

    from ..timing import Timer
    from . import report
    from .run import init_ranks

    tp, device = init_ranks("nccl" if args.device == "cuda" else "gloo")
    if device.type == "cpu":
        torch.set_num_threads(threads_per_rank(tp.world_size))
    torch.manual_seed(1234 + tp.rank)
    timer = Timer(tp, device)
    meta = _meta(args, tp, device) if tp.rank == 0 else {}
    bar = None
    if tp.rank == 0 and not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(args.shapes), desc="fluxlite-profile", unit="shape", file=sys.stderr, dynamic_ncols=True)

    def after_each(i: int, shape: Shape, elapsed: float) -> None:
        if tp.rank != 0:
            return
        report.write_all(args.out, dict(meta, stopped="not finished: the run was still going (or was killed)"), rows, png=False)
        if bar is not None:
            bar.update(1)
        else:
            print(f"fluxlite-profile: {i + 1}/{len(args.shapes)} {shape.label} measured ({elapsed:.1f} s)", flush=True)

    rows, error = [], None
    try:
        stopped = _measure(args, timer, rows, after_each, signals.wrap)
        signals.disarm()
    except BaseException as exc:  # a signal, or an error (a peer that left after one is one too)
        signals.disarm()
        why = (str(exc).strip() or "-").splitlines()[0].encode("ascii", "replace").decode()[:120]  # a title's worth
        error, stopped = exc, f"error: {type(exc).__name__}: {why}"
    if bar is not None:
        bar.close()
    stopped = signals.name or stopped
    if tp.rank == 0:
        meta["stopped"] = stopped
        print(report.format_table(meta, rows), flush=True)
        paths = report.write_all(args.out, meta, rows)
        done = f"fluxlite-profile: stopped by {stopped} after {len(rows)} of {len(args.shapes)} shapes; " if stopped else ""
        print(f"{done}wrote " + ", ".join(map(str, paths)), flush=True)
    signals.restore()
    if signals.name:
        return signals.exit_status()
    if error is not None:
        raise error
    timer.align()
    fluxlite.release_workspaces()
    torch.distributed.destroy_process_group()
    return EXIT_TIME_LIMIT if stopped else 0


def _spawned_rank(rank: int, args, port: int) -> None:
    from ..group import die_with_parent

    die_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(args.world_size), LOCAL_WORLD_SIZE=str(args.world_size))
    status = profile_on_this_rank(args)
    if status:
        sys.exit(status)  # SystemExit passes mp.spawn's wrapper, which would turn an interrupt into 0


def _spawn(args) -> int:
    """Run the ranks as child processes; a SIGINT or SIGTERM here is passed on to them (rank 0
    first: it writes the results). The exit status is rank 0's, else the first failed rank's."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    from ..group import free_local_port

    ctx = mp.start_processes(_spawned_rank, args=(args, free_local_port()), nprocs=args.world_size, join=False)

    received = []

    def forward(signum, frame):
        received.append(signum)
        for p in ctx.processes:
            if p.is_alive():
                os.kill(p.pid, signum)
    saved = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not ctx.join(grace_period=SPAWN_GRACE_S):
            pass
        return 0
    except ProcessException as exc:
        status = ctx.processes[0].exitcode
        if status in (EXIT_TIME_LIMIT, 128 + signal.SIGINT, 128 + signal.SIGTERM):
            return status  # rank 0 has said why, and where the results are
        if received:  # a rank stopped before it could take the signal itself
            print(f"fluxlite-profile: stopped by {signal.Signals(received[0]).name}", file=sys.stderr)
            return 128 + received[0]
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        print(f"fluxlite-profile: error: rank {exc.error_index} failed: {why}", file=sys.stderr)
        return status if status and status > 0 else 1
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        from . import report

        meta, rows = args.loaded
        print(report.format_table(meta, rows))
        print("wrote " + ", ".join(map(str, report.write_all(args.out, meta, rows))))
        return 0
    if args.device == "cpu" and on_rank_0():
        print(f"fluxlite-profile: note: CPU ranks only exercise the profiler's protocol; their times say nothing "
              f"about GPU performance (rounds {args.rounds}, warm-up {args.warmup})", file=sys.stderr, flush=True)
    return profile_on_this_rank(args) if _under_torchrun() else _spawn(args)
