"""One fused call: its number and parity, deadline and call signature; the producer beside the consumer; the
join; and the failure handling shared by every op.

Call agreement: before a rank sets any flag of call ``e`` on a peer, it writes the call's signature
(:func:`fluxlite.schedule.call_signature`) into that peer's signature slots of parity ``e % 2``, in
the alignment step that starts the call (:mod:`fluxlite.kernels.align`). A consumer that finds a
peer's flag set compares the peer's signature with its own before it uses the data
(:meth:`Call.wait_peer` on CPU, :func:`fluxlite.kernels.device_flags.wait_peer` on GPU), so ranks in
different calls raise :class:`~fluxlite.FluxliteCallMismatchError` instead of reading each other's
bytes as something else. It costs a few stores per peer and call, no collective and no host
synchronisation.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from .. import _cuda_driver as cu
from .. import schedule as sch
from ..epilogue import PLAIN, Epilogue
from ..errors import FluxliteCallMismatchError, FluxliteError
from ..host_flags import host_wait_flag
from ..kernels import gemm_core, split_wait
from ..kernels.device_flags import ERR_TIMEOUT_RS
from . import producer
from .. import workspace as _workspace
from .state import FusedState


class TileProtocol(Protocol):
    """What a plan needs of an op (:class:`fluxlite.ops.op.Op` is one): its name and signature
    code, its schedule, its kernels' block table, its signature options and who announces its
    arrival (see that class for each)."""

    name: str
    code: int

    def schedule(self, world_size: int, rank: int, rows: int, block_m: int, splits: int | None,
                 variant: str) -> sch.TileSchedule: ...

    def tile_order(self, sched: sch.TileSchedule, num_n: int, group_m: int, programs: int) -> torch.Tensor: ...

    def kernel_blocks(self, sched: sch.TileSchedule, variant: str) -> torch.Tensor: ...

    def signature_options(self, variant: str, ep: Epilogue) -> tuple[bool, ...]: ...

    def ready_on_arrival(self, variant: str) -> bool: ...

CPU_BLOCK_M = 64  # rows per block for the CPU torch consumer
SHARED_GPU_FREE_SMS = 8  # SMs a fused kernel leaves to the producer's copy kernels when ranks share a GPU
# Producer programs a plan keeps: every layer of a model whose layers share shapes (one plan) has
# its own input addresses, in either data half (80 layers: 160). Calls whose tensors move every
# time would grow it without bound: past this it starts again.
MAX_PROGRAMS = 256
# Eager calls replayed from a graph (Call.run): a call's work is captured the second time its key
# is seen (the first may be a one-off), and at most this many per plan and workspace generation.
# Graphs are never dropped while the workspace lives (a replay of one may still be in flight), so
# keys past the limit run without a graph.
MAX_GRAPHS = 512
_SEEN_ONCE, _NO_GRAPH = object(), object()

def block_m_of(consumer: str, config: gemm_core.GemmConfig) -> int:
    return config.block_m if consumer == "triton" else CPU_BLOCK_M


@dataclass
class Bindings:
    """What a plan made for one generation of its workspace (the buffers move only when it grows):
    per data half, the views of our buffers that a call uses, and producer programs by the
    addresses of the call's own tensors (raw addresses; no value in a program depends on the call)."""

    generation: int = -1
    views: dict = field(default_factory=dict)  # parity -> the op's views of our data half
    programs: dict = field(default_factory=dict)  # (parity, addresses of the call's tensors) -> producer.Program
    graphs: dict = field(default_factory=dict)  # Call.replay_key -> state.Replay (or seen once, or no graph)

    def clear(self) -> None:
        """Drop everything (after a growth, once the device is idle: the views would keep the old
        buffers alive, and the programs and graphs address them)."""
        self.generation = -1
        self.views.clear()
        self.programs.clear()
        self.graphs.clear()


@dataclass(frozen=True)
class Plan:
    """What a call of one (op, shapes, dtype, options) needs that does not change from call to call:
    the schedule, the kernel's tables on the device, the call signature, the kernel config; and what
    it made for the workspace's current buffers (:class:`Bindings`)."""

    sched: sch.TileSchedule
    config: gemm_core.GemmConfig
    consumer: str
    num_n: int  # column blocks per row block (1 for the CPU torch consumer)
    signature: tuple[int, ...]
    signature_dev: torch.Tensor  # int32 [SIG_WORDS] on the workspace's device
    blocks: torch.Tensor  # schedule.kernel_blocks() on the device
    tiles: torch.Tensor  # schedule.tile_order() on the device
    split_rows: tuple[tuple[int, int], ...]  # rows [lo, hi) of a chunk that each split covers
    ready_on_arrival: bool  # the alignment step sets our `ready` on the peers (not AG's pull: its producer does)
    kernels: dict  # compiled kernels of this plan, for the direct launch (fluxlite.kernels.launch), the
    # matmul consumer's counter writes (memop batches), and GEMM-AllReduce's split boundaries on the device
    bound: Bindings = field(default_factory=Bindings)
    variant: str = ""  # the op's plan variant (fluxlite.ops.op.Op.plan_variant): what path its calls take


def get_plan(state: FusedState, op: TileProtocol, rows: int, K: int, N: int, dtype: torch.dtype, variant: str = "",
             ep: Epilogue = PLAIN, config: gemm_core.GemmConfig | None = None, consumer: str | None = None,
             splits: int | None = None) -> Plan:
    """The cached plan of this call of ``op`` (:class:`fluxlite.ops.op.Op`) on ``state``'s workspace
    (built on first use). ``rows``: what the op's signature counts; ``N``: the weight's rows;
    ``variant``: the op's (:meth:`~fluxlite.ops.op.Op.variant`); ``config``: the kernel's (default:
    :func:`gemm_core.default_config`). Of the epilogue only what shapes the plan is in its key (the
    activation, SwiGLU's halved output, and whether row scales travel): a scale is a launch argument,
    so a new scale value builds no plan. ``consumer``: what computes the call (default: the state's,
    :attr:`FusedState.consumer`; an op's matmul consumer runs as ``"torch"`` on CUDA too:
    :meth:`fluxlite.ops.op.Op.consumer_of`); ``splits``: at most this many per
    chunk (default: the op's schedule's)."""
    consumer = consumer or state.consumer
    config = config or gemm_core.default_config()
    key = (op.name, rows, K, N, dtype, variant, ep.activation, ep.row_scaled, config, consumer)
    plan = state.plans.get(key)
    if plan is None:
        if _workspace.capturing(state.ws.device):
            raise FluxliteError(
                f"fluxlite: a CUDA graph is capturing a fused {op.name} call with a shape that never ran eagerly "
                f"(rows={rows}, K={K}, N={N}, {str(dtype).replace('torch.', '')}, variant={variant or None}, "
                f"activation={ep.activation}, row_scale={ep.row_scaled}): run each fused call once eagerly, with "
                f"the shapes and options you capture, before capturing")
        ws = state.ws
        if ws.is_cuda and ws.shares_gpu and not config.num_progs:
            # A copy between two ranks' buffers on one GPU runs as a copy kernel, not on a copy engine:
            # a persistent consumer on every SM would starve the producer's pulls until the timeout.
            config = dataclasses.replace(config, num_progs=max(1, gemm_core.sm_count(ws.device) - SHARED_GPU_FREE_SMS))
        block_m = block_m_of(consumer, config)
        if splits is not None:
            blocks = -(-op.chunk_rows(rows, ws.world_size) // block_m)
            splits = 1 if ws.world_size == 1 else min(splits, max(1, blocks))
        sched = op.schedule(ws.world_size, ws.rank, rows, block_m, splits, variant)
        num_n = gemm_core.column_blocks(ep.out_features(N), config, ep.gated) if consumer == "triton" else 1
        # The consumer is part of the protocol (what a partial holds), so ranks that disagree on it disagree on
        # the signature.
        signature = sch.call_signature(op.code, rows, K, N, dtype, sched.splits, op.signature_options(variant, ep),
                                       matmul=consumer != "triton")
        dev = ws.device
        programs = gemm_core.persistent_programs(config, dev)  # tiles at a time
        plan = Plan(sched, config, consumer, num_n, signature,
                    torch.tensor(signature, dtype=torch.int32, device=dev),
                    op.kernel_blocks(sched, variant).to(dev),
                    op.tile_order(sched, num_n, config.group_m, programs).to(dev),
                    tuple(sched.split_rows(s) for s in range(sched.splits)), op.ready_on_arrival(variant), {},
                    variant=variant)
        state.plan_builds += 1
        state.plans[key] = plan
    return plan


class Call:
    """One fused call on ``state``'s workspace: takes the next call number and parity; runs a producer program beside
    a consumer."""

    def __init__(self, state: FusedState, op: str, plan: Plan, timeout_s: float) -> None:
        self.state, self.ws, self.op, self.plan, self.timeout_s = state, state.ws, op, plan, timeout_s
        ws = state.ws
        self.epoch = state.next_epoch()
        self.parity = self.epoch % 2
        self.capturing = _workspace.capturing(ws.device)
        if self.capturing:
            state.captured = True
        self.deadline = time.monotonic() + timeout_s
        self.failed: BaseException | None = None  # the first failure of the producer or the consumer
        self.feed: producer.Feed | None = None  # CUDA, a consumer of many launches: the producer as it goes
        if ws.is_cuda:
            cu.ensure_context(ws.device.index)
            self.stream = torch._C._cuda_getCurrentRawStream(ws.device.index)

    @property
    def signature_base(self) -> int:
        """Where the signatures of this call's parity start, from the start of its flag region."""
        W = self.ws.world_size
        return sch.signature_slot(W, self.parity, 0) - sch.region_start(W, self.parity)

    def flag_addr(self, rank: int, slot: int) -> int:
        """The address (mapped here) of ``rank``'s flag ``slot`` of this call's region."""
        return self.ws.flag_addr(rank, sch.region_start(self.ws.world_size, self.parity) + slot)

    def views(self, make: Callable[[], object]):
        """The views of our data half that this call uses: ``make()``'s, made once per plan, data
        half and workspace generation."""
        bound = self._bindings()
        views = bound.views.get(self.parity)
        if views is None:
            with _workspace.lasting():  # kept for the calls to come
                views = bound.views[self.parity] = make()
        return views

    def program(self, addresses: tuple[int, ...], build: Callable[[], list]) -> producer.Program:
        """The producer program of this call, whose own tensors (those not in the workspace) sit at
        ``addresses``: ``build()``'s steps, made once per plan, data half, workspace generation and
        addresses (a training loop's tensors mostly come back at the same addresses)."""
        programs = self._bindings().programs
        key = (self.parity, addresses)
        program = programs.get(key)
        if program is None:
            if len(programs) >= MAX_PROGRAMS:
                programs.clear()
            program = programs[key] = producer.Program.of(build(), cuda=self.ws.is_cuda,
                                                          fed=self.plan.consumer != "triton",
                                                          signal_copy=self.state.signal_copy())
        return program

    def _bindings(self) -> Bindings:
        bound = self.plan.bound
        if bound.generation != self.ws.generation:
            bound.clear()
            bound.generation = self.ws.generation
        return bound

    def align(self) -> None:
        """Start the call on the device (CPU: the host): :meth:`FusedState.align`, which also announces
        it to the peers."""
        self.state.align(self.parity, self.epoch, self.timeout_s, self.plan.signature_dev, self.plan.ready_on_arrival)

    def align_args(self) -> dict:
        """CUDA: what a kernel that starts this call itself passes to its alignment
        (:meth:`FusedState.align_args`)."""
        return self.state.align_args(self.parity, self.timeout_s, self.plan.signature_dev, self.plan.ready_on_arrival)

    def kernel_args(self) -> dict:
        """The arguments every fused kernel launch takes from the plan, the workspace and the call."""
        plan = self.plan
        return dict(blocks=plan.blocks, tiles=plan.tiles, flags=self.state.region(self.parity), sig=plan.signature_dev,
                    error=self.state.error, call=self.state.call_number, world_size=self.ws.world_size,
                    sig_base=self.signature_base, timeout_s=self.timeout_s, config=plan.config, cache=plan.kernels)

    def wait_info(self) -> dict:
        return dict(deadline=self.deadline, timeout_s=self.timeout_s, op=self.op, rank=self.ws.rank,
                    epoch=self.epoch, abort=self._abort_if_failed)

    def _abort_if_failed(self) -> None:
        if self.failed is not None:
            raise FluxliteError(f"fluxlite {self.op}: the other side of this call failed: {self.failed}")

    def wait_peer(self, slot: int, *, peer: int, chunk: int, split: int, what: str) -> None:
        """CPU consumer: wait for ``peer``'s ready flag, check its call signature against ours, then
        wait for the data flag ``slot`` (see :func:`fluxlite.kernels.device_flags.wait_peer`)."""
        ws = self.ws
        flags = self.state.region(self.parity)
        host_wait_flag(flags, sch.ready_slot(peer), sch.SET, what="its arrival at this call (ready flag)",
                       peer=peer, chunk=chunk, split=split, **self.wait_info())
        at = self.signature_base + peer * sch.SIG_WORDS
        theirs = tuple(flags[at : at + sch.SIG_WORDS].tolist())
        if theirs != self.plan.signature:
            raise FluxliteCallMismatchError(rank=ws.rank, peer=peer, mine=sch.describe_signature(self.plan.signature),
                                            theirs=sch.describe_signature(theirs))
        host_wait_flag(flags, slot, sch.SET, what=what, peer=peer, chunk=chunk, split=split, **self.wait_info())

    def wait_split(self, split: int, peer: int | None = None, code: int = ERR_TIMEOUT_RS) -> None:
        """CUDA matmul consumer: enqueue the bounded wait for split ``split`` of ``peer``'s data (every
        peer's: ``None``) on the current stream (:mod:`fluxlite.kernels.split_wait`; ``code``: what a
        timeout records). The producer's signals of that split that the feed holds go ahead of it."""
        state, W = self.state, self.ws.world_size
        if self.feed is not None:
            self.feed.waiting(split)
        split_wait.launch(flags=state.region(self.parity), sig=self.plan.signature_dev, error=state.error,
                          call=state.call_number, first=sch.data_slot(W, 0, split), peer_stride=sch.peer_slots(),
                          rank=self.ws.rank, world_size=W, sig_base=self.signature_base, timeout_s=self.timeout_s,
                          cache=state.split_wait_kernels, peer=peer, code=code)

    def replay_key(self, *tensors: torch.Tensor | None, scale: float) -> tuple | None:
        """What a CUDA call's enqueued work depends on beyond its plan and workspace generation: the
        parity, the addresses and strides of ``tensors`` (every tensor the producer or the kernel
        touches), the epilogue ``scale`` and the timeout (both launch arguments). Not the call's
        number: the kernels read it from the device (:mod:`fluxlite.kernels.align`). ``None`` on
        CPU, which replays nothing."""
        if not self.ws.is_cuda:
            return None
        key = [self.parity, scale, self.timeout_s]
        for t in tensors:
            key += (None, None) if t is None else (t.data_ptr(), t.stride())
        return tuple(key)

    def run(self, program: Callable[[], producer.Program], consume, replay_key: tuple | None = None,
            copied: tuple[int, ...] = (), end: Callable[[], None] | None = None, consume_aligns: bool = False) -> None:
        """Run the producer ``program()`` (thread or stream) beside ``consume()``; join; raise any failure.
        (``program`` is asked for only when the call does not replay: a replay needs none.)

        On CUDA the work is enqueued on the caller's stream and the producer stream
        (:meth:`_enqueue`). An eager call whose ``replay_key`` (:meth:`replay_key`) was seen before
        replays that work from a CUDA graph captured the second time (:meth:`_replay`): one launch
        instead of some twenty driver calls, the host cost a fused call would otherwise add to a
        one-call-at-a-time (latency-bound) step. ``copied``: the addresses of the call's own tensors
        that the producer's copies read or write (those of its program). ``end``: kernels that
        end the call once the consumer is done (GEMM-AllReduce's gather), launched on the caller's
        stream behind it and beside the producer's last steps, which it must not touch (on CPU: this
        thread, after the producer thread). ``consume_aligns``: ``consume()`` starts the call itself
        (:meth:`align_args` in its first kernel; on CPU :meth:`align`), for a call with no producer
        whose first kernel can do it beside its own work (AG-GEMM's gather by the SMs).
        """
        state = self.state
        if self.ws.is_cuda:
            if not self._replay(replay_key, copied, program, consume, end, consume_aligns):
                self._enqueue(program(), consume, end, consume_aligns)
            state.note_timeout(self.timeout_s)
            if self.capturing:  # a replay's failure surfaces at the next check (the record's mirror) or synchronize()
                if state.blocking:  # Python's default warning filter shows it once per process
                    warnings.warn("FLUXLITE_BLOCKING is ignored while a CUDA graph captures fused calls (a capture "
                                  "cannot synchronise); call fluxlite.synchronize() after replays instead", stacklevel=2)
                return
            if state.blocking:
                state.synchronize()
            return
        if not consume_aligns:
            self.align()
        future = state.submit(self._produce_on_thread, program().steps)
        try:
            consume()
            if self.plan.consumer == "triton":
                state.read_kernel_error(self.timeout_s)  # the interpreted kernel's record, at once
                state.check()
        except BaseException as exc:
            self.failed = self.failed or exc
            future.exception()  # the producer's waits end at the deadline, or at once now
            # Raise the first failure: a producer's timeout reaches the consumer as an abort.
            state.poison(self.failed)
            if self.failed is exc:
                raise
            raise self.failed from None
        exc = future.exception()
        if exc is not None:
            state.poison(exc)
            raise exc
        if end is not None:
            try:
                end()
                state.read_kernel_error(self.timeout_s)  # the interpreted kernels' record, at once
                state.check()
            except BaseException as exc:
                state.poison(exc)
                raise

    def _enqueue(self, program: producer.Program, consume, end: Callable[[], None] | None = None,
                 consume_aligns: bool = False) -> None:
        """Enqueue the call on the current stream (the caller's, or the capture stream of its own
        graph), where the alignment kernel and the consumer launch, and on the producer stream,
        which forks from it (after the alignment kernel, which announced the call to the peers) and
        joins it again (the next call's alignment kernel clears our flags). A failure reaches the
        host through the error record's mirror, which the failing kernel writes itself.

        The producer's steps up to its first wait are queued before the kernel (its first copies
        start while the kernel is being launched), the rest after it. A stream wait blocks
        everything queued behind it when streams share a hardware queue (always so with
        ``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron sets; by chance otherwise), so no wait may sit
        in front of the kernel: RS's producer waits on the kernel's own counters, and AG's pull
        waits on a peer that may never come, where only the kernel's bounded wait (which then
        releases the producer) ends the call. A consumer of many launches (GEMM-RS's matmul
        consumer) takes the rest piece by piece as it enqueues them (:class:`producer.Feed`), since
        its own waits on the peers would otherwise sit in front of the producer's copies. ``end``
        launches on this stream behind the consumer and every producer step's enqueueing, but not
        behind the producer stream's work: the stream joins it after ``end`` (GEMM-AllReduce's end
        copies the peers' earlier splits while the producer's last copies are on their way), except
        where ranks share a GPU, where it launches after the join. ``consume_aligns``: as in
        :meth:`run` (no alignment kernel: ``consume()`` starts the call).
        """
        state = self.state
        main, side = torch._C._cuda_getCurrentRawStream(self.ws.device.index), state.producer_handle
        if not consume_aligns:
            self.align()
        if not program.steps:  # no producer (the one shots, AG-GEMM's SM push): no stream to fork and join
            consume()
            if end is not None:
                end()
            return
        for dst, src, nbytes in program.staged:  # before the consumer takes the SMs a copy may need
            cu.memcpy_async(main, dst, src, nbytes)
        cu.event_record(state.call_start.cuda_event, main)
        cu.stream_wait_event(side, state.call_start.cuda_event)
        before, after = program.on_stream
        producer.enqueue_on_stream(before, side)
        events = None
        if self.plan.consumer == "triton":
            consume()
        else:  # a consumer of many launches takes the producer's steps as it goes (producer.Feed)
            events = state.count_event_at
            self.feed = producer.Feed(program.pieces, side, main, events)
            try:
                consume()
                after = self.feed.rest()
            finally:
                self.feed = None
        producer.enqueue_on_stream(after, side, events)
        cu.event_record(state.call_end.cuda_event, side)
        # The end beside the producer's last steps, except where ranks share a GPU: a copy to a peer
        # on this GPU may run as a copy kernel (the driver picks), for which the end's programs, spinning
        # on the peers' flags on every SM, may leave no room until the timeout.
        if end is not None and not self.ws.shares_gpu:
            end()
            end = None
        cu.stream_wait_event(main, state.call_end.cuda_event)
        if end is not None:
            end()

    def _replay(self, key: tuple | None, copied: tuple[int, ...], program: Callable[[], producer.Program],
                consume, end: Callable[[], None] | None = None, consume_aligns: bool = False) -> bool:
        """Replay this eager call's work from the graph of ``key``, captured now if ``key`` was seen
        once before; ``False`` (nothing enqueued) when the call runs without a graph: no key, the
        first sighting, past :data:`MAX_GRAPHS`, or under a user's capture.

        A graph's copy nodes hold the allocations that the addresses ``copied`` had at its capture.
        When one of those went back to the driver (``torch.cuda.empty_cache()``) and a new one came
        back at the same address, the key matches but launching the graph is undefined: it crashed
        in ``cuGraphLaunch`` on two H200s. So a graph is launched only while the driver's buffer ids
        of ``copied`` are those it was captured with; otherwise it is captured again. The old one
        is idle by then (freeing memory to the driver synchronises the device), so it can go.

        A program that waits on a peer (AG-GEMM's pull: the peers' ready flags) replays too: the
        wait and the kernel are sibling branches of the graph, and when the peer never comes the
        kernel's bounded wait sets those flags itself, so the graph ends (tests/test_gpu_fused.py,
        ``[ag_pull]``; README "CUDA graphs")."""
        if key is None or self.capturing:
            return False
        graphs = self._bindings().graphs
        graph = graphs.get(key)
        if graph is None:
            if len(graphs) < MAX_GRAPHS:
                graphs[key] = _SEEN_ONCE
            return False
        if graph is _NO_GRAPH:
            return False
        buffers = cu.buffer_ids(copied)
        if graph is _SEEN_ONCE or graph.buffers != buffers:
            try:
                graph = self.state.capture(lambda: self._enqueue(program(), consume, end, consume_aligns))._replace(
                    buffers=buffers)
            except Exception as exc:  # run it eagerly: the peers are waiting for this call's flags
                graphs[key] = _NO_GRAPH
                warnings.warn(f"fluxlite: capturing a fused {self.op} call to replay failed, so it runs without a "
                              f"graph ({type(exc).__name__}: {exc})", stacklevel=3)
                return False
            graphs[key] = graph
        cu.graph_launch(graph.exec, self.stream)
        return True

    def _produce_on_thread(self, steps: list) -> None:
        try:
            producer.run_on_thread(steps, **self.wait_info())
        except BaseException as exc:
            self.failed = self.failed or exc
            raise
