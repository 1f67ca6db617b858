"""An op is one object: everything fluxlite knows about one collective GEMM, in one subclass of
:class:`Op` (one module of this package each), and the call path every op shares.

What an op brings (the methods a subclass defines):

- **its call**: :meth:`Op.check` (every input check, before any communication: a
  :class:`Args` with the operands as the op uses them), :meth:`Op.dispatch_rows` and
  :meth:`Op.variant` (its dispatch key), :meth:`Op.result` (what the public function returns);
- **its references**: :meth:`Op.sequential` (the collective, then the GEMM) and
  :meth:`Op.decomposed` (the collective cut into point-to-point steps beside chunked GEMMs);
- **its tile protocol** (:mod:`fluxlite.fused`): :attr:`Op.first` (the schedule's chunk order),
  :meth:`Op.chunk_rows`, :meth:`Op.block_slot` (which flag or counter each row block waits on or
  counts into), :meth:`Op.signature_options`, :meth:`Op.ready_on_arrival`, :meth:`Op.prepare` (its
  plan and workspace) and :meth:`Op.fused` (its producer program beside its consumer: the CPU
  consumer or the GPU kernel).

The shared call path (:meth:`Op.__call__`) checks, picks the implementation (an explicit ``impl``,
or :mod:`fluxlite.dispatch`), runs it, and remembers the call's decisions for its repeats. A call
whose arguments differ from an earlier call's only in their data (the same ``impl``, group, options
and timeout; tensors of the same type, shape, strides, dtype and device) repeats that call's
decisions: its checks passed for exactly these arguments, and its implementation (for fused, its
plan and workspace) stands. It goes straight to the implementation, so what a training step's or a
decode loop's repeated calls cost on the host is the call's own work. Nothing here, in :mod:`fluxlite.fused` or in
:mod:`fluxlite.dispatch` branches on an op's name: docs/adding_an_op.md says what a new op adds.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import torch
import torch.distributed as dist

from .. import dispatch, epilogue, fused
from .. import schedule as sch
from .._sequential import ROW_UNIT_BYTES, zero_padded
from .._validate import check_disjoint, check_impl, check_operands, check_out, check_timeout, operands_as_used
from ..dispatch import GPU_FUSED_DTYPES, Choice
from ..host_flags import resolve_timeout
from ..kernels.gemm_core import GemmConfig
from ..process import PROCESS
from ..group import TPGroup, resolve_group
from ..workspace import capturing, get_workspace, lasting


OPS: dict[str, "Op"] = {}
"""Every op by name, in the order they were defined."""


MATMUL_MIN_FLOPS = 2.5e11
"""The smallest GEMM (``2 * rows * K * N`` per rank, ``rows`` as dispatch counts them) that a forced
fused call runs with an op's matmul consumer (:meth:`Op.consumer_of`) where ``K`` is a multiple of
64. On two H200s GEMM-RS's Triton kernel was the faster below it (8192x2048->4096, 4096x3072->4096 and
512x14336->8192: 1.25-1.32x the overlap limit against 1.29-1.77x; 4096x7168->4096 a tie;
1024x8192->8192 is the exception, 1.27x against 1.37x), and the matmul consumer at and above it on
all ten shapes measured (1.00-1.11x against 1.02-1.46x; BENCHMARKS.md, "GEMM-RS by cuBLAS and the copy
engine")."""


@dataclasses.dataclass
class Args:
    """A call's arguments as the op uses them: checked, ``a`` and ``bias`` contiguous, the weight in
    ``nn.Linear`` layout or its transpose, all detached. ``options``: the op's own (by keyword)."""

    tp: TPGroup
    a: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    out: torch.Tensor | None
    ep: epilogue.Epilogue
    timeout_s: float
    options: dict[str, Any]


class Repeat(NamedTuple):
    """What a call decided before it ran, kept for the calls whose key equals its own
    (:meth:`Op._repeat`): the group, the implementation it ran (``"fused"``, ``"sequential"`` or
    ``"decomposed"``), for fused the state and plan, the checked epilogue, the timeout, and the
    choice. ``captured_differs``: for an ``auto`` call, whether a captured call with the same key
    would run another choice (no mode declared, the modes' choices differ); such a captured call
    asks dispatch instead of repeating this."""

    tp: TPGroup
    impl: str
    state: fused.FusedState | None
    plan: fused.Plan | None
    ep: epilogue.Epilogue
    timeout_s: float
    choice: Choice | None
    captured_differs: bool = False

    def in_force(self, choice: Choice | None) -> bool:
        """Whether it still holds, for a call that runs ``choice`` (None: an explicit ``impl``)."""
        return (self.state is None or not self.state.closed) and (choice is None or self.choice is choice)


MAX_REPEATS = 1024  # distinct calls remembered; past this it starts again


class Op:
    """One collective GEMM (module docstring). Subclasses set the class attributes and define the
    methods below; defining a subclass registers its one instance (:meth:`define`)."""

    name: ClassVar[str]  # the public function's name, the dispatch key's op, and what errors call it
    code: ClassVar[int]  # its call signatures' op code (fluxlite.schedule.call_signature), 1-15
    option_bits: ClassVar[tuple[str, ...]] = ()  # names of its signature's option bits (signature_options)
    first: ClassVar[int]  # the schedule's first chunk, from this rank (fluxlite.schedule.build)
    a_layout: ClassVar[str]  # how the docs write a and weight, for messages: "[m, K]"
    weight_layout: ClassVar[str]
    tensor_options: ClassVar[tuple[str, ...]] = ()  # options that are tensors (a repeat keys their layout)
    rule_min_flops_beyond_two: ClassVar[float] = 0.0  # dispatch.rule's FLOPs floor at more than two ranks

    def __init__(self) -> None:
        # The op's own options and their defaults, from its check's keyword arguments: a call that
        # leaves one out has the same repeat key as a call that gives its default.
        common = {"group", "impl", "timeout", "out"}
        self.option_defaults = {name: p.default for name, p in inspect.signature(self.check).parameters.items()
                                if p.kind is p.KEYWORD_ONLY and name not in common}

    @property
    def repeats(self) -> dict[tuple, Repeat]:
        """The op's remembered fused calls: per process, forgotten with the workspaces they use."""
        return PROCESS.repeats.setdefault(self.name, {})

    @classmethod
    def define(cls) -> "Op":
        """Make the op's instance and register it (by name in :data:`OPS`, by code for signatures)."""
        op = cls()
        if cls.name in OPS or cls.code in sch.OP_SIGNATURES:
            raise ValueError(f"an op named {cls.name!r} or with code {cls.code} is defined already")
        OPS[cls.name] = op
        sch.OP_SIGNATURES[cls.code] = (cls.name, cls.option_bits)
        return op

    # ---- what each op defines ------------------------------------------------------------------
    def check(self, a, weight, bias, *, group, impl, timeout, out, **options) -> Args:
        """Every check of a call, before any communication; the arguments as the op uses them."""
        raise NotImplementedError

    def out_shape(self, args: Args) -> tuple[int, int]:
        raise NotImplementedError

    def dispatch_rows(self, a: torch.Tensor, world_size: int, options: dict) -> int:
        """The GEMM's rows on each rank (``a @ weight.T`` per row: 2·K·N FLOPs), for dispatch."""
        raise NotImplementedError

    def variant(self, options: dict) -> str:
        """What of the options makes a different fused call (its plan, its dispatch key): ``""`` if none."""
        return ""

    def result(self, value, args: Args):
        """What the public function returns, from what the implementations return."""
        return value

    def sequential(self, args: Args):
        raise NotImplementedError

    def decomposed(self, args: Args):
        raise NotImplementedError

    def chunk_rows(self, rows: int, world_size: int) -> int:
        """Rows of one chunk when a call's signature counts ``rows``."""
        raise NotImplementedError

    def block_slot(self, world_size: int, rank: int, chunk: int, split: int, variant: str) -> int:
        """What a row block of ``(chunk, split)`` waits on or counts into (fluxlite.schedule's slots), -1: nothing."""
        raise NotImplementedError

    def signature_options(self, variant: str, ep: epilogue.Epilogue) -> tuple[bool, ...]:
        """The call signature's option bits (named by :attr:`option_bits`)."""
        return ()

    def ready_on_arrival(self, variant: str) -> bool:
        """Whether the alignment step sets this rank's ``ready`` flag on the peers (else the producer does)."""
        return True

    def prepare(self, state: fused.FusedState, args: Args, config) -> fused.Plan:
        """The plan of a fused call of these arguments' shapes, with room for it in the workspace."""
        raise NotImplementedError

    def has_matmul_consumer(self, args: Args) -> bool:
        """Whether this call's fused path can run as cuBLAS GEMMs per split, the tile protocol's waits
        and counts between them (the op's matmul consumer), as well as the Triton kernel."""
        return False

    def one_matmul(self, world_size: int, args: Args) -> bool:
        """Whether a call on ``world_size`` ranks takes the matmul consumer whatever its ``K``,
        activation and size (where it has one and its output rows are whole 16-byte units): none
        here; AG-GEMM's small calls."""
        return False

    def consumer_of(self, state: fused.FusedState, args: Args, config: GemmConfig | None) -> str:
        """What computes a fused call. On CPU: the state's consumer. On CUDA, a named kernel ``config``
        runs the Triton kernel; without one (a forced ``impl="fused"``, or the rule), the matmul
        consumer (``"torch"``, :meth:`has_matmul_consumer`) where cuBLAS's output rows are whole
        16-byte units and

        - the op says so for the call (:meth:`one_matmul`);
        - or ``K`` is off a multiple of 64, with no activation or one that is not gated: rows the Triton
          kernel's TMA loads split across cache lines. On one H100 its GEMM with GELU took 1.06-1.33x
          the time of cuBLAS's GEMM and the activation's pass at 7 of 8 such shapes; on two H200s
          the two tied (BENCHMARKS.md). SwiGLU's pass reads twice the columns it writes, and there
          the Triton kernel was the faster on both;
        - or, with no activation, the GEMM has at least :data:`MATMUL_MIN_FLOPS`;

        else the Triton kernel, whose one launch costs less on short GEMMs and whose epilogue saves
        an activation's pass over the output. ``auto`` measures both (:meth:`kernel_configs`)."""
        if not state.ws.is_cuda:
            return state.consumer
        if config is not None or not self.has_matmul_consumer(args):
            return "triton"
        K, N = args.a.shape[1], args.weight.shape[0]
        if args.ep.out_features(N) * args.a.element_size() % ROW_UNIT_BYTES:
            return "triton"
        if self.one_matmul(state.ws.world_size, args):
            return "torch"
        if K % 64:
            return "triton" if args.ep.gated else "torch"
        if args.ep.activation is not None:
            return "triton"
        rows = self.dispatch_rows(args.a, args.tp.world_size, args.options)
        return "torch" if self.dispatch_flops(args.a, args.weight, rows) >= MATMUL_MIN_FLOPS else "triton"

    def fused(self, state: fused.FusedState, plan: fused.Plan, args: Args):
        """The fused call by ``plan``: its producer program beside its consumer."""
        raise NotImplementedError

    # ---- the tile protocol, from the above -------------------------------------------------------
    def schedule(self, world_size: int, rank: int, rows: int, block_m: int, splits: int | None = None,
                 variant: str = "") -> sch.TileSchedule:
        """This op's schedule for a call whose signature counts ``rows``, in a plan of ``variant``
        (an op may cut its splits by it)."""
        return sch.build(world_size, rank, self.chunk_rows(rows, world_size), block_m, self.first, splits)

    def tile_order(self, sched: sch.TileSchedule, num_n: int, group_m: int, programs: int) -> torch.Tensor:
        """The consumer's tile table (:meth:`fluxlite.schedule.TileSchedule.tile_order`), ``programs``
        tiles running at a time: groups of ``group_m`` row blocks across splits, for the weight's
        reuse in L2."""
        return sched.tile_order(num_n, group_m)

    def kernel_blocks(self, sched: sch.TileSchedule, variant: str) -> torch.Tensor:
        """The kernels' block table (:meth:`fluxlite.schedule.TileSchedule.kernel_blocks`)."""
        return sched.kernel_blocks(lambda chunk, split: self.block_slot(sched.world_size, sched.rank, chunk, split,
                                                                        variant))

    def kernel_operands(self, state: fused.FusedState, args: Args) -> Args:
        """``args`` as this op's fused path takes them: the GEMM runs in the fused kernel, so rows that
        TMA cannot load are padded (:func:`pad_for_tma`)."""
        return pad_for_tma(state, args)

    # ---- the call path every op shares -----------------------------------------------------------
    def __call__(self, a, weight, bias=None, *, group=None, impl="auto", timeout=None, out=None, **options):
        """The public call (each op's module wraps it with its signature and docs)."""
        return self._call(a, weight, bias, group, impl, timeout, out, options)

    def _call(self, a, weight, bias, group, impl: str, timeout, out, options: dict, forced: Choice | None = None):
        """A call by ``impl``; with ``forced``, a candidate that ``auto`` measures, run as a call that
        named it would run (its checks, and for fused its repeats), so that what ``auto`` measures
        is what its choice costs the caller, host time included."""
        options = {**self.option_defaults, **options}
        key, repeat, known = self._repeat(group, timeout, impl, options, (a, weight, bias, out), forced)
        if repeat is not None:
            if out is not None:  # the key holds no addresses
                check_disjoint(self.name, out, self.inputs(a, weight, bias, options))
            args = self.as_used(repeat, a, weight, bias, out, options)
            grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)  # torch.no_grad()'s effect, for a fraction of its host time
            try:
                if repeat.plan is None:
                    value = getattr(self, repeat.impl)(args)
                else:
                    value = self.fused(repeat.state, repeat.plan, self.kernel_operands(repeat.state, args))
            finally:
                torch._C._set_grad_enabled(grad)
            return self.result(value, args)
        args = self.check(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out, **options)
        if forced is not None:
            choice, dispatch_key = forced, None
        else:
            choice, dispatch_key = known if known is not None else self.choose(impl, args, self._candidate(
                a, weight, bias, group, timeout, out, options))
        if choice.impl == "fused":
            check_fused_dtype(self.name, args.a)
        return self.result(self.run(choice, args, remember=(key, dispatch_key)), args)

    def _candidate(self, a, weight, bias, group, timeout, out, options: dict) -> Callable[[Choice], Any]:
        """``run(choice)`` for :func:`fluxlite.dispatch.choose`: this call's arguments by ``choice``."""
        return lambda c: self._call(a, weight, bias, group, c.impl, timeout, out, options, c)

    def impl_of(self, a, weight, bias=None, *, group=None, impl="auto", timeout=None, **options) -> str:
        """The implementation a call with these arguments runs, without running it: ``impl`` if it
        names one, else what ``auto`` chooses, by the same step as the call (it may agree with the
        peers and measure, so every rank must ask together); ``"sequential"`` where there is nothing
        to overlap (one rank, an empty GEMM: :func:`impl_of`)."""
        options = {**self.option_defaults, **options}
        repeat = self._repeat(group, timeout, impl, options, (a, weight, bias, None))[1]
        if repeat is not None:
            return repeat.impl
        args = self.check(a, weight, bias, group=group, impl=impl, timeout=timeout, out=None, **options)
        run = self._candidate(a, weight, bias, group, timeout, None, options)
        return impl_of(self.choose(impl, args, run)[0], args)

    def inputs(self, a, weight, bias, options: dict) -> dict:
        """The call's input tensors by name (``None`` where not given): what ``out`` must not overlap."""
        return {"a": a, "weight": weight, "bias": bias, **{k: options.get(k) for k in self.tensor_options}}

    def as_used(self, repeat: Repeat, a, weight, bias, out, options: dict) -> Args:
        """The arguments of a repeated call as the op uses them (their checks passed before)."""
        a, weight, bias = operands_as_used(a, weight, bias, gated=repeat.ep.gated)
        tensors = {k: options[k].contiguous() for k in self.tensor_options if options.get(k) is not None}
        return Args(repeat.tp, a, weight, bias, out, repeat.ep, repeat.timeout_s, {**options, **tensors})

    def choose(self, impl: str, args: Args, run: Callable[[Choice], Any]) -> tuple[Choice, dispatch.Key | None]:
        """``(choice, dispatch key)``: an explicit ``impl``'s choice (no key), or what dispatch picks
        (``run(choice)``: the call by a candidate, for a measurement)."""
        if impl in dispatch.EXPLICIT:
            return dispatch.EXPLICIT[impl], None
        rows = self.dispatch_rows(args.a, args.tp.world_size, args.options)
        key = dispatch.Key.of(self.dispatch_op(args.options), args.tp, args.a, args.weight, rows)
        flops = self.dispatch_flops(args.a, args.weight, rows)
        floor = self.rule_min_flops_beyond_two
        if empty_gemm(args):  # nothing to measure: it runs as sequential whatever the choice (impl_of)
            return dispatch.rule(args.tp.world_size, flops, args.a.device, args.a.dtype, rows, floor), key
        return dispatch.choose(key, args.tp, args.a, flops, run, args.timeout_s, lambda: self.kernel_configs(args),
                               floor), key

    @staticmethod
    def dispatch_flops(a: torch.Tensor, weight: torch.Tensor, rows: int) -> float:
        """The GEMM FLOPs per rank that dispatch's rule weighs: ``rows`` (:meth:`dispatch_rows`) by
        ``a``'s ``K`` by ``weight``'s rows."""
        return 2.0 * rows * a.shape[1] * weight.shape[0]

    def kernel_configs(self, args: Args) -> tuple[GemmConfig | None, ...]:
        """The kernel configs this call's fused path can run, each of which ``auto`` measures as a
        candidate of its own (none: its fused path runs no GEMM kernel of ours; ``None`` among them:
        the fused call with no config named, the matmul consumer where :meth:`consumer_of` runs it)."""
        return ((None,) if self.has_matmul_consumer(args) else ()) + tuple(dispatch.GPU_CONFIGS)

    def dispatch_op(self, options: dict) -> str:
        """The op of a dispatch key: the name, then after a ``+`` each option that changes which
        implementation is the fastest: the variant (``ag_gemm+gathered``), an activation
        (``ag_gemm+gelu``: the kernel's epilogue applies it at no cost, where sequential and
        decomposed pay a pass over the output) and each tensor option given (``ag_gemm+row_scale``:
        the matmul consumer cannot apply a row scale)."""
        given = (k for k in self.tensor_options if options.get(k) is not None)
        return "+".join(p for p in (self.name, self.variant(options), options.get("activation"), *given) if p)

    def run(self, choice: Choice, args: Args, *, remember=None):
        """This call by ``choice``; its implementation (a fused call's state and plan) is remembered
        for its repeats under ``remember`` (the call's own run, not a dispatch measurement's)."""
        impl = impl_of(choice, args)
        state = plan = None
        with torch.no_grad():
            if impl != "fused":
                value = getattr(self, impl)(args)
            else:
                # The state and the plan outlive this call (workspace.lasting); the call itself runs in
                # the caller's mode, which an out= made under torch.inference_mode() needs.
                with lasting():
                    state = fused.state_of(get_workspace(args.tp.group, args.a.device, timeout=args.timeout_s),
                                           args.timeout_s)
                    args = self.kernel_operands(state, args)
                    plan = self.prepare(state, args, choice.config)
                value = self.fused(state, plan, args)
        if remember is not None:
            self._remember(*remember, choice, impl, args, state, plan)
        return value

    def _repeat(self, group, timeout, impl, options: dict, tensors: tuple, forced: Choice | None = None
                ) -> tuple[tuple | None, Repeat | None, tuple[Choice, dispatch.Key] | None]:
        """``(key, repeat, known)`` (``options``: every option of the op, defaults filled in).

        ``key``: the key of a call's arguments as the checks read them (not the tensors' data); ``None``
        when an argument cannot be part of one (not a tensor, unhashable, a bad timeout): the checks
        then say what is wrong. Options hold their types too, so ``True`` is not taken for ``1.0``.
        ``repeat``: the earlier call with that key, if it is still in force. ``known``: for ``auto``,
        ``(choice, dispatch key)`` when dispatch remembers the choice of an eager call like this one
        (:func:`fluxlite.dispatch.eager_choice`), so the call need not ask again. ``auto`` repeats
        only once its choice is known: its first call is checked and dispatched in full.
        ``forced``: the choice of a call that ``auto`` measures (``impl`` is its impl).

        An ``auto`` call's key holds :func:`fluxlite.dispatch.repeat_stamp` where a measured
        candidate's holds its choice: so a repeated ``auto`` call costs what a call that names its
        implementation costs, plus reading the stamp, and calls in modes whose choices differ (two
        configs, say) each repeat their own decisions instead of replacing one another's."""
        try:
            a, weight = tensors[0], tensors[1]
            group = dist.group.WORLD if group is None else group
            if impl == "auto":
                by = dispatch.repeat_stamp()
                if by is None:  # a tuning block: dispatch decides every call
                    return None, None, self._auto_known(group, options, a, weight)
            else:
                by = id(forced)
            device = a.get_device()
            # options holds every option of the op (defaults filled in), so their order is fixed
            plain = tuple([(k, type(v), v) for k, v in options.items() if k not in self.tensor_options])
            layouts = tuple([_tensor_key(options.get(k)) for k in self.tensor_options])
            key = (group, timeout if timeout is not None else resolve_timeout(None), type(timeout),
                   torch._C._cuda_getDevice() if device >= 0 else -1, impl, by, plain,
                   *map(_tensor_key, tensors), *layouts)
            repeat = self.repeats.get(key)
            if impl != "auto":
                return key, (repeat if repeat is not None and repeat.in_force(forced) else None), None
            if repeat is not None and repeat.in_force(None) and not (repeat.captured_differs and capturing(a.device)):
                return key, repeat, None
            known = self._auto_known(group, options, a, weight)
        except Exception:  # noqa: BLE001 - any malformed argument: the full checks raise the documented error
            return None, None, None
        return (key, None, known) if known is not None else (None, None, None)

    def _auto_known(self, group, options: dict, a: torch.Tensor,
                    weight: torch.Tensor) -> tuple[Choice, dispatch.Key] | None:
        """``(choice, dispatch key)`` of an ``auto`` call whose choice dispatch remembers for an eager
        call in its mode now, or ``(choice, None)`` where the rule decides it without measuring
        (:func:`fluxlite.dispatch.ruled_choice`: one rank, ``FLUXLITE_AUTO=off``, CPU ranks), or None
        (nothing remembered and a measurement to make, capture): one look-up
        (:func:`fluxlite.dispatch.eager_choice_of`) by what the dispatch key is made of: the op, the
        group, the operands' shapes, dtype and device, the options that are not tensors, and which
        tensor options are given."""
        values = tuple(v is not None if k in self.tensor_options else v for k, v in options.items())
        signature = (self.name, group, a.shape, a.dtype, a.get_device(), weight.shape, values)

        def key_of() -> dispatch.Key | None:
            W = group.size()
            if W == 1:
                return None
            return dispatch.Key.of_size(self.dispatch_op(options), W, a, weight,
                                        self.dispatch_rows(a, W, options))

        def ruled(key: dispatch.Key | None) -> Choice | None:  # the rule's answer, as choose() gets it
            flops = self.dispatch_flops(a, weight, self.dispatch_rows(a, group.size(), options))
            return dispatch.ruled_choice(key, a, flops, self.rule_min_flops_beyond_two)
        return dispatch.eager_choice_of(signature, key_of, a, ruled)

    def _remember(self, key: tuple | None, dispatch_key: dispatch.Key | None, choice: Choice, impl: str,
                  args: Args, state: fused.FusedState | None, plan: fused.Plan | None) -> None:
        """Keep a call's decisions for its repeats: an explicit ``impl`` or a measured candidate
        always; ``auto`` while the choice is the one dispatch remembers, or the rule's for the call's
        shapes (no ``dispatch_key``: :meth:`_auto_known`), not a rule that
        :func:`fluxlite.dispatch.choose` applied to a key it will measure later (inside a
        :func:`~fluxlite.dispatch.tuning` block, or a capture of a key not measured yet). A captured
        ``auto`` call whose choice may differ from an eager one's has no key (:meth:`_repeat`:
        dispatch decides it), so what is kept is what an eager call runs."""
        if key is None:
            return
        differs = False
        if dispatch_key is not None:
            if dispatch.remembered(dispatch_key) is not choice:
                return
            differs = dispatch.depends_on_capture(dispatch_key)
        repeats = self.repeats
        if len(repeats) >= MAX_REPEATS:
            repeats.clear()
        repeats[key] = Repeat(args.tp, impl, state, plan, args.ep, args.timeout_s, choice, differs)


ROW_ALIGN_BYTES = 128
"""How far the fused kernel's operands are padded when TMA cannot load them."""


def pad_for_tma(state: fused.FusedState, args: Args) -> Args:
    """``args`` as the fused kernel takes them. TMA loads rows that start 16-byte aligned; where a row
    operand's do not, the kernel would fall back to element-wise pointer loads, which ran 11-15x slower
    than cuBLAS on an H200. So, for the Triton consumer only:

    - ``a: [M, K]`` and ``weight: [N, K]`` rows off 16 bytes (``K % 8 != 0`` in bf16): both are
      zero-padded to ``Kp`` columns, the next multiple of :data:`ROW_ALIGN_BYTES` (zeros add nothing
      to any product; a K-major weight gets zero rows);
    - a K-major weight (the transpose of a row-major ``[K, N]``, a backward's ``W.t()``, read in rows
      of ``N``) whose rows are off 16 bytes: copied to row-major ``[N, K]`` first.

    Rows that TMA can load are left as they are: padding them to whole 128-byte lines too measured no
    faster, only the copy's cost slower (BENCHMARKS.md). Every rank has the same ``K``, so every rank
    pads alike (``Kp`` is in the call's signature)."""
    a, weight = args.a, args.weight
    N, size = weight.shape[0], a.element_size()
    pad = tma_k_padding(state, a)
    weight_ok = not pad if weight.is_contiguous() else (N * size) % ROW_UNIT_BYTES == 0
    if (not pad and weight_ok) or state.consumer != "triton":
        return args
    if not pad:
        return dataclasses.replace(args, weight=weight.contiguous())
    # One copy each, only the padding zeroed (zero_padded): a zero fill of the whole tensor first,
    # as torch.nn.functional.pad does, writes each operand twice.
    a = zero_padded(a, 0, pad)
    if weight_ok and not weight.is_contiguous():  # K-major with whole rows of N: it stays K-major
        weight = zero_padded(weight.t(), pad, 0).t()
    else:  # row-major, a K-major weight copied to it in the same pass
        weight = zero_padded(weight, 0, pad)
    return dataclasses.replace(args, a=a, weight=weight)


def tma_k_padding(state: fused.FusedState, a: torch.Tensor) -> int:
    """The columns :func:`pad_for_tma` adds to ``K`` (``a: [M, K]``) on ``state``: up to the next
    multiple of :data:`ROW_ALIGN_BYTES` where the Triton consumer's TMA cannot load rows of ``K``,
    else 0."""
    size, K = a.element_size(), a.shape[1]
    if state.consumer != "triton" or (K * size) % ROW_UNIT_BYTES == 0:
        return 0
    return -K % (ROW_ALIGN_BYTES // size)


def _tensor_key(t: torch.Tensor | None) -> tuple | None:
    # The device, not get_device(): that is -1 for a CPU tensor and a meta one alike.
    return None if t is None else (type(t), t.shape, t.stride(), t.dtype, t.device)


def empty_gemm(args: Args) -> bool:
    """No rows, no output columns or ``K = 0``: nothing to overlap, and a dimension that the fused
    paths' kernels and workspace views do not take."""
    return args.a.numel() == 0 or args.weight.numel() == 0


def impl_of(choice: Choice, args: Args) -> str:
    """``choice``'s implementation, or sequential where there is nothing to overlap: a world of one,
    or an empty GEMM (:func:`empty_gemm`), which every impl runs as sequential does."""
    return "sequential" if args.tp.world_size == 1 or empty_gemm(args) else choice.impl


def check_fused_dtype(op: str, a: torch.Tensor) -> None:
    if a.device.type == "cuda" and a.dtype not in GPU_FUSED_DTYPES:
        raise TypeError(
            f"fluxlite.{op}(impl='fused') on CUDA supports a.dtype in {GPU_FUSED_DTYPES}, got {a.dtype}; "
            f"use impl='sequential' (or 'auto') for {a.dtype}"
        )


def check_common(op: Op, a, weight, bias, group, impl, timeout) -> TPGroup:
    """The checks every op makes first; returns the group."""
    check_impl(impl)
    check_timeout(timeout)
    tp = resolve_group(group)
    check_operands(op.name, tp, a, weight, bias, op.a_layout, op.weight_layout)
    return tp


def finish_args(op: Op, tp: TPGroup, a, weight, bias, out, ep, timeout, options: dict) -> Args:
    """The checked call's :class:`Args`, ``out`` checked against the op's shape and the inputs."""
    given = op.inputs(a, weight, bias, options)
    a, weight, bias = operands_as_used(a, weight, bias, gated=ep.gated)
    args = Args(tp, a, weight, bias, out, ep, resolve_timeout(timeout), options)
    check_out(op.name, out, op.out_shape(args), a)
    if out is not None:
        check_disjoint(op.name, out, given)
    return args
