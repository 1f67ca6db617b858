"""What the profiler times for one (op, shape), on every rank: the cases and the figures of a row.

Implementations timed (:data:`IMPLS`), all in the same rounds: ``gemm`` (the per-rank GEMM alone,
``torch.matmul`` on operands with whole 16-byte rows, :func:`fluxlite._sequential.whole_row_operands`),
``comm`` (the collective alone), ``copy`` (the op's bytes moved by the copy
engine alone) and ``limit`` (the GEMM with that copy running beside it: what an overlapped op can
cost at best, :mod:`fluxlite.profile.limit`); ``sequential``, ``decomposed`` and ``fused``
(fluxlite's ops), ``torch_symm_mem`` (``torch.ops.symm_mem``'s fused op, on CUDA where it works;
for GEMM-AllReduce, which torch does not fuse, the GEMM then ``symm_mem.one_shot_all_reduce``)
and ``auto``, timed in each mode as a call that declares that mode (the timer declares it,
:meth:`fluxlite.timing.Timer._marked`). Figures derived from the throughput times
(:func:`derive`)::

    speedup     = T_sequential / T_impl                        (per mode)
    exposed     = T_impl - T_gemm                               (the communication left visible)
    efficiency  = (T_sequential - T_impl) / (T_sequential - T_limit)
    vs_limit    = T_impl / T_limit
    bound       = T_sequential / T_limit                        (per mode: throughput, latency)

``bound`` is the speedup over sequential that the limit itself reaches in that mode: an overlapped
implementation whose GEMM runs as fast as ``torch.matmul``'s can beat sequential by no more. In
latency mode a call starts on a device that idled through the barrier before it, and a long GEMM
then takes longer than queued behind others (on two H200s a GEMM of 4.9-5.1 ms queued took
5.6-5.8 ms so), while the all-reduce does not stretch alike: the latency bound can be far below the
throughput one.

An efficiency of 1 hides all the communication that the hardware lets an overlapped op hide, 0
hides none (sequential); it is NaN where sequential is within noise of the limit (nothing to hide).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.distributed as dist

import fluxlite

from .. import dispatch
from .._sequential import all_gather_rows, reduce_scatter_rows, whole_row_operands
from ..group import TPGroup
from . import limit as limits
from .presets import Shape
from ..timing import Timer, medians, per_round, run_each_once, time_samples

IMPLS = ("gemm", "comm", "copy", "limit", "sequential", "decomposed", "fused", "torch_symm_mem", "auto")
REFERENCES = ("gemm", "comm", "copy", "limit", "sequential")  # always timed: the figures are relative to them
OVERLAPPED = ("sequential", "decomposed", "fused", "torch_symm_mem", "auto")  # what the derived figures cover
REPORTED_MODES = ("throughput", "latency", "eager", "host")
AUTO_MODES = (*dispatch.MEASURED_MODES, dispatch.EAGER)
"""The modes of ``auto_vs_best``: throughput and latency, where ``auto`` runs a declared mode's choice,
and eager calls back to back, where it runs an undeclared call's (:mod:`fluxlite.timing`)."""
BOUND_MODES = ("throughput", "latency")
"""The modes of ``bound`` (sequential over the limit): where the limit is timed as the calls are."""
TIMEOUT_S = 60


def op_case(shape: Shape, tp: TPGroup, dtype: torch.dtype, device: torch.device):
    """``(make, {impl: fn(inputs) -> output})`` for ``shape``; ``make()`` draws one input set."""
    W, M, K, N = tp.world_size, shape.M, shape.K, shape.N
    group_name = tp.group.group_name
    ag = shape.op == "ag_gemm"
    op = getattr(fluxlite, shape.op)

    def make():
        a = torch.randn(M // W if ag else M, K, device=device, dtype=dtype)
        x = dict(a=a, w=(torch.randn(N, K, device=device) / K**0.5).to(dtype))
        if ag:
            x["gathered"] = all_gather_rows(a, tp)  # the GEMM alone's input
        else:
            x["partial"] = torch.randn(M, N, device=device, dtype=dtype)  # the collective alone's input
        x["gemm_a"], x["gemm_w"] = whole_row_operands(x["gathered"] if ag else a, x["w"])
        if shape.op == "gemm_ar" and device.type == "cuda":
            x["symm"] = symmetric_buffer((M, N), dtype, device, group_name)  # torch's all-reduce reads it
        return x

    out_rows = M // W if shape.op == "gemm_rs" else M

    def call(x, impl):
        """fluxlite's call, into an output kept per input set and implementation: a recurring call
        meets the addresses it met before, as each step of a model does (an eager fused call is
        replayed from a graph keyed by its tensors' addresses, :meth:`fluxlite.fused.Call.run`)."""
        out = x.get("out_" + impl)
        if out is None:
            out = x["out_" + impl] = torch.empty(out_rows, N, device=device, dtype=dtype)
        return op(x["a"], x["w"], group=tp.group, impl=impl, timeout=TIMEOUT_S, out=out)

    def torch_ar(x):
        """torch has no fused GEMM-AllReduce: the GEMM into a symmetric buffer, then its one-shot
        all-reduce (every rank reads every peer's buffer; no multicast)."""
        if x["symm"] is None:
            raise RuntimeError("no symmetric buffer for torch's one_shot_all_reduce")
        torch.matmul(x["a"], x["w"].t(), out=x["symm"])
        return torch.ops.symm_mem.one_shot_all_reduce(x["symm"], "sum", group_name)

    def gemm(x):
        """The per-rank GEMM alone, on operands whose rows are whole 16-byte units, padded once per
        input set (:func:`~fluxlite._sequential.whole_row_operands`): what the hardware allows for these
        sizes, where a fused or sequential call pays for any padding it does."""
        return torch.matmul(x["gemm_a"], x["gemm_w"].t())

    torch_op = torch_ar
    if ag:
        comm = lambda x: all_gather_rows(x["a"], tp)  # noqa: E731
        torch_op = lambda x: torch.ops.symm_mem.fused_all_gather_matmul(x["a"], [x["w"].t()], 0, group_name)[1][0]  # noqa: E731
    elif shape.op == "gemm_rs":
        comm = lambda x: reduce_scatter_rows(x["partial"], tp)  # noqa: E731
        torch_op = lambda x: torch.ops.symm_mem.fused_matmul_reduce_scatter(x["a"], x["w"].t(), "sum", 0, group_name)  # noqa: E731
    else:
        comm = lambda x: all_reduce_rows(x["partial"], tp)  # noqa: E731
    cases = dict(gemm=gemm, comm=comm,
                 **{impl: (lambda x, impl=impl: call(x, impl)) for impl in ("sequential", "decomposed", "fused")},
                 torch_symm_mem=torch_op, auto=lambda x: call(x, "auto"))
    return make, {name: fn for name, fn in cases.items() if fn is not None}


def symmetric_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, group_name: str):
    """A tensor in torch's symmetric memory, rendezvoused over the group (collective), or ``None`` where
    torch cannot make one (the ``torch_symm_mem`` case then fails and is reported)."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        t = symm_mem.empty(*shape, dtype=dtype, device=device)
        symm_mem.rendezvous(t, group_name)
        return t
    except Exception as exc:  # noqa: BLE001 - reported as the case's failure
        print(f"rank {dist.get_rank()}: torch symmetric memory failed: {exc!r}", flush=True)
        return None


def all_reduce_rows(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """The sum over ranks of ``x`` (a fresh tensor): GEMM-AllReduce's collective alone."""
    out = x.clone()
    if tp.world_size > 1:
        dist.all_reduce(out, group=tp.group)
    return out


def bound(times: dict[str, dict[str, float]]) -> dict[str, float]:
    """``T_sequential / T_limit`` per mode of :data:`BOUND_MODES` from ``times[impl][mode]`` (ms;
    NaN where either is missing)."""
    def t(impl, mode):
        return times.get(impl, {}).get(mode, math.nan)
    return {m: t("sequential", m) / t("limit", m) for m in BOUND_MODES}


def fastest(times: dict[str, dict[str, float]], mode: str) -> str | None:
    """Which of ``auto``'s candidates (:data:`fluxlite.dispatch.MEASURED_IMPLS`) read fastest in
    ``mode`` of ``times[impl][mode]`` (ms); None where none was timed there."""
    timed = {i: times[i][mode] for i in dispatch.MEASURED_IMPLS if not math.isnan(times.get(i, {}).get(mode, math.nan))}
    return min(timed, key=timed.get) if timed else None


def derive(times: dict[str, dict[str, float]], rounds_ms: dict[str, dict[str, list[float]]] | None = None) -> dict:
    """The figures of a row from ``times[impl][mode]`` (ms; see the module docstring): ``limit_ms``
    and, per implementation of :data:`OVERLAPPED` that was timed, the speedups over sequential
    (per mode), the exposed communication (ms), the efficiency against the limit and ``vs_limit``;
    ``bound[mode]``: sequential over the limit, per mode of :data:`BOUND_MODES`;
    ``auto_vs_best[mode]``: ``auto`` over the fastest of what it chooses among
    (:data:`fluxlite.dispatch.MEASURED_IMPLS`) that was timed, per mode of :data:`AUTO_MODES`; and, from
    ``rounds_ms[impl][mode]`` (each round's ms, the max over the ranks: :func:`fluxlite.timing.per_round`),
    ``auto_vs_best_bounds[mode]``: ``[low, median, high]`` of ``auto``'s per-round time over that
    fastest one's in the same round, the bounds of the median at 95% (:func:`fluxlite.dispatch.paired_bounds`;
    the least and the largest ratio at 5-7 rounds, unbounded below 5). A time that is missing (not
    timed, or failed) makes its figures NaN."""
    def t(impl, mode="throughput"):
        return times.get(impl, {}).get(mode, math.nan)

    def auto_bounds(mode: str) -> list[float]:
        return list(dispatch.paired_bounds(rounds_ms["auto"][mode], rounds_ms[fastest(times, mode)][mode]))

    g, seq, lim = t("gemm"), t("sequential"), t("limit")
    timed = [i for i in OVERLAPPED if i in times]
    candidates = [i for i in dispatch.MEASURED_IMPLS if i in times]
    return dict(
        limit_ms=lim,
        speedup_vs_sequential={i: {m: t("sequential", m) / t(i, m) for m in REPORTED_MODES} for i in timed},
        exposed_comm_ms={i: t(i) - g for i in timed},
        efficiency={i: limits.efficiency(seq, t(i), lim) for i in timed},
        vs_limit={i: t(i) / lim for i in timed},
        bound=bound(times),
        auto_vs_best={m: t("auto", m) / t(fastest(times, m), m) for m in AUTO_MODES}
        if "auto" in times and candidates else {},
        auto_vs_best_bounds={m: auto_bounds(m) for m in AUTO_MODES if m in rounds_ms["auto"]}
        if rounds_ms and "auto" in rounds_ms and candidates else {},
    )


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


def profile_shape(timer: Timer, shape: Shape, *, dtype: torch.dtype, rounds: int, warmup: int, sets: int,
                  batch_ms: float, tune: bool, impls: tuple[str, ...] = IMPLS,
                  wrap: Callable[[Callable], Callable] | None = None) -> dict:
    """Time the implementations ``impls`` of ``shape`` and the :data:`REFERENCES` in the same rounds
    (see :mod:`fluxlite.timing`); one report row. Collective: every rank calls it alike.
    ``wrap``: applied to every case (``fn(inputs) -> output``) before it is timed."""
    tp, device = timer.tp, timer.device
    make, cases = op_case(shape, tp, dtype, device)
    transfer, no_limit = add_limit_cases(timer, shape, dtype, cases)
    if wrap is not None:
        cases = {name: wrap(fn) for name, fn in cases.items()}
    wanted = (set(impls) | set(REFERENCES)) - (set() if device.type == "cuda" else {"torch_symm_mem"})  # CUDA only
    fns = {i: cases[i] for i in IMPLS if i in wanted and i in cases}
    try:
        inputs = [make() for _ in range(sets)]
        x = inputs[0]
        key = dispatch.Key.of(shape.op, tp, x["a"], x["w"], shape.M)
        if tune:
            with dispatch.tuning():
                cases["auto"](x)
        outputs, failed = run_each_once(timer, fns, x)
        checked = [i for i in OVERLAPPED if i in outputs and i != "sequential" and "sequential" in outputs]
        errs = timer.max_over_ranks([rel_err(outputs[i], outputs["sequential"]) for i in checked])
        del outputs
        samples, batch = time_samples(timer, fns, inputs, rounds=rounds, warmup=warmup, batch_ms=batch_ms)
        times = medians(timer, samples)
        paired = [i for i in ("auto", *dispatch.MEASURED_IMPLS) if i in samples]
        rounds_ms = per_round(timer, samples, paired, AUTO_MODES) if "auto" in samples else {}
    finally:
        if transfer is not None:
            transfer.close()
    auto = dispatch.describe(key, shape.flops, device, dtype, fluxlite.ops.OPS[shape.op].rule_min_flops_beyond_two)
    modes = dispatch.describe_modes(key) or {}
    return dict(op=shape.op, M=shape.M, K=shape.K, N=shape.N, names=list(shape.names), flops=shape.flops,
                times_ms=times, **derive(times, rounds_ms), rel_err=dict(zip(checked, errs)), failed={**no_limit, **failed},
                batch=batch, auto=dict(auto.to_json(), label=auto.label, source=auto.source,
                                       modes={m: c.label for m, c in modes.items()}))


def add_limit_cases(timer: Timer, shape: Shape, dtype: torch.dtype, cases: dict) -> tuple:
    """Add ``limit`` and ``copy`` to ``cases`` (``limit`` runs ``cases["gemm"]``); ``(transfer, {})``.
    Where the transfer cannot be built on some rank (the ranks agree, :func:`agreed`), ``(None,
    {case: why})``: the shape is timed without them, and its limit figures are NaN. Call
    ``transfer.close()`` when done."""
    transfer = None
    with agreed(timer) as verdict:
        cases["limit"], cases["copy"], transfer = limits.limit_case(timer.tp, shape.op, shape.M, shape.K, shape.N,
                                                                    dtype, timer.device, cases["gemm"], TIMEOUT_S)
    if not verdict.why:
        return transfer, {}
    if transfer is not None:
        transfer.close()
    for name in ("limit", "copy"):
        cases.pop(name, None)
    return None, dict.fromkeys(("limit", "copy"), verdict.why)


class Verdict:
    """What :func:`agreed` found: ``why`` a step failed on some rank (this rank's error, or "failed on
    another rank"), or ``""`` where it went through on every rank."""

    why = ""


@contextlib.contextmanager
def agreed(timer: Timer):
    """Run the ``with`` block, then let the ranks agree whether it failed on any of them (as
    :func:`~fluxlite.timing.run_each_once` does for each of its callables); yields a :class:`Verdict`.
    An ``Exception`` in the block is taken (and reported in the verdict), not raised. Collective."""
    verdict = Verdict()
    try:
        yield verdict
    except Exception as exc:  # reported in the verdict; the ranks drop the step together
        verdict.why = f"{type(exc).__name__}: {exc}"[:300]
    if timer.max_over_ranks([float(bool(verdict.why))])[0]:
        verdict.why = verdict.why or "failed on another rank"


def init_ranks(backend: str | None = None, torch_symm_mem: bool = True) -> tuple[TPGroup, torch.device]:
    """``(tp, device)``: :func:`fluxlite.init`'s group (``backend``: its default where ``None``) and this
    rank's device, its GPU where the group serves CUDA tensors, else the CPU; on the GPU, with
    ``torch_symm_mem``, torch's fused ops enabled for the group (:func:`enable_torch_symm_mem`)."""
    tp = fluxlite.init(backend)
    if "cuda" not in tp.device_types:
        return tp, torch.device("cpu")
    if torch_symm_mem:
        enable_torch_symm_mem(tp)
    return tp, torch.device("cuda", torch.cuda.current_device())


def enable_torch_symm_mem(tp: TPGroup) -> None:
    """torch's fused ops need symmetric memory enabled for the group on torch <= 2.11 (deprecated
    there); a failure only means ``torch_symm_mem`` fails and is reported as such."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(tp.group.group_name)
    except Exception as exc:  # reported; the profile goes on without torch's op
        print(f"rank {dist.get_rank()}: enable_symm_mem_for_group failed: {exc!r}", flush=True)
