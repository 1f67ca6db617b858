"""What the fused protocol keeps on one workspace between calls (docs/protocol.md): the
epoch counter, the failure state (poison and the GPU kernels' error record), the tile counters, the
call plans and the producer (a worker thread on CPU; a high-priority side stream and the events that
order it on CUDA). The workspace under it only allocates and maps peers.

One :class:`FusedState` per :class:`~fluxlite.workspace.SymmetricWorkspace`, made by the first
fused call on it (:func:`state_of`) and dropped by :func:`fluxlite.release_workspaces`. Its options
are given when it is made; :func:`state_of` takes them from the documented environment variables
``FLUXLITE_CPU_CONSUMER`` and ``FLUXLITE_BLOCKING`` then, and no call reads them again.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch
import torch.distributed as dist

from .. import _cuda_driver as cu
from .. import schedule as sch
from ..errors import FluxliteCallMismatchError, FluxliteError
from ..host_flags import exception_from_record, host_store, host_wait, resolve_timeout
from ..kernels import align, gather_end, push_rows, split_wait
from ..kernels.device_flags import MIRROR_WORD, RECORD_WORDS
from .. import workspace as _workspace
from ..process import PROCESS
from ..workspace import SymmetricWorkspace, wait_idle
from . import producer


CONSUMERS = ("torch", "triton")
MAX_SCRATCH_VIEWS = 256  # views of the scratch buffer kept by shape (FusedState.scratch); past this it starts again


class Replay(NamedTuple):
    """An eager call's work captured in a CUDA graph (:meth:`FusedState.capture`)."""

    graph: torch.cuda.CUDAGraph  # owns the executable graph
    exec: int  # its raw CUgraphExec, launched on the caller's stream (fluxlite._cuda_driver.graph_launch)
    buffers: tuple[int, ...] = ()  # the driver's ids of the allocations its copies address (Call._replay)


class FusedState:
    """The fused layer's state on ``ws``; see the module docstring.

    Options: ``consumer``, what computes a CPU call: ``"torch"`` (per-block matmuls) or ``"triton"``
    (the GPU kernel, interpreted); CUDA always runs the kernel. ``blocking``: on CUDA, synchronise
    after every call, so a kernel's timeout surfaces at the call.
    """

    def __init__(self, ws: SymmetricWorkspace, timeout_s: float, *, consumer: str = "torch",
                 blocking: bool = False) -> None:
        if consumer not in CONSUMERS:
            raise ValueError(f"FLUXLITE_CPU_CONSUMER (the fused CPU consumer) must be 'torch' or 'triton', "
                             f"got {consumer!r}")
        self.ws = ws
        self.consumer = "triton" if ws.is_cuda else consumer
        self.blocking = blocking
        self.epoch = 0  # fused calls so far on ws (eager or captured); call e uses parity e % 2
        # Once a user's CUDA graph captured a fused call here, its replays move the device's call
        # sequence without the host: the workspace may no longer grow (the graphs hold its buffers).
        self.captured = False
        self.plans: dict[tuple, object] = {}  # fluxlite.fused.call.Plan per (op, shapes, dtype, options)
        self.closed = False  # released (fluxlite.release_workspaces): no call may use it again
        self.plan_builds = 0  # plans built so far (a cached plan is reused: tests check this)
        self._poison: BaseException | None = None
        self._poison_raised = False
        self._timeout_s = timeout_s
        if ws.is_cuda:
            self.producer_stream = torch.cuda.Stream(device=ws.device, priority=-1)
            self.producer_handle = self.producer_stream.cuda_stream
            # Reused by every call to order the producer stream after the caller's and back.
            self.call_start, self.call_end = torch.cuda.Event(), torch.cuda.Event()
            for event in (self.call_start, self.call_end):
                event.record(self.producer_stream)  # creates the event, so it has a raw handle
            # Eager calls replayed from graphs (fluxlite.fused.call.Call.run): captured on a stream of
            # their own, into one memory pool (what a launch allocates: Triton's scratch). Calls on
            # one workspace are stream-ordered (they share its counters and flags), so their graphs
            # never replay at once and may share the pool.
            self._capture_stream = torch.cuda.Stream(device=ws.device)
            self._graph_pool: tuple | None = None  # made by capture(); (pool handle, workspace generation)
        else:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fluxlite-producer")
        self.error = torch.zeros(RECORD_WORDS, dtype=torch.int32, device=ws.device)  # a kernel's failure record
        if ws.is_cuda:
            # The record's mirror in pinned host memory, which the kernel that writes the record
            # fills, the code word last (fluxlite.kernels.device_flags): check() reads the code word, and
            # the whole record once the code is set, without blocking and without a copy per call.
            self._err_host = torch.zeros(RECORD_WORDS, dtype=torch.int32, pin_memory=True)
            self._err_code = ctypes.c_int32.from_address(self._err_host.data_ptr())
            mirror = cu.host_device_pointer(self._err_host.data_ptr())
            words = [(mirror >> shift) & 0xFFFFFFFF for shift in (0, 32)]
            self.error[MIRROR_WORD : MIRROR_WORD + 2] = torch.tensor(words, dtype=torch.int64).to(torch.int32)
        self.counters = torch.zeros(sch.num_counters(ws.world_size), dtype=torch.int32, device=ws.device)
        if ws.is_cuda:
            # A matmul consumer's counts (fluxlite.fused.producer.Feed): one event per tile counter,
            # recorded where the count falls and waited on by the producer stream, by the counter's address.
            self._count_events = [torch.cuda.Event() for _ in range(sch.claim_slot(ws.world_size))]
            for event in self._count_events:
                event.record(self.producer_stream)
            self.count_event_at = {self.counters.data_ptr() + 4 * slot: event.cuda_event
                                   for slot, event in enumerate(self._count_events)}
        # What the producer copies into a peer's flag to set it (fluxlite.fused.producer.SignalCopy)
        self.set_word = torch.full((1,), sch.SET, dtype=torch.int32, device=ws.device)
        # The device's call sequence (fluxlite.kernels.align): the parity the next call must use,
        # null calls so far, and calls so far (the number a kernel's error record names); on CPU the
        # host keeps it the same way.
        self.sequence = torch.tensor([1, 0, 0], dtype=torch.int32, device=ws.device)
        self.call_number = self.sequence[2:]  # the kernels' call_ptr
        self._align_kernels: dict = {}
        self.gather_kernels: dict = {}  # GEMM-AllReduce's gather end, warmed up (kernels.gather_end)
        # AG-GEMM's gather of a small chunk by the SMs (fluxlite.kernels.push_rows): its programs' count
        # and program 0's go (both 0 between launches), and its kernels, warmed up
        self.push_count = torch.zeros(2, dtype=torch.int32, device=ws.device)
        self.push_kernels: dict = {}
        self.split_wait_kernels: dict = {}  # the matmul consumer's bounded wait (fluxlite.kernels.split_wait)
        self._scratch: torch.Tensor | None = None  # bytes of this rank's own for a call's working data (scratch)
        self._scratch_views: dict[tuple, torch.Tensor] = {}
        self._retired_scratch: list[torch.Tensor] = []  # replaced while a user's graph may replay into them
        self._bound = (-1, (), None, ())  # (workspace generation, then what _bind makes)
        if ws.is_cuda:
            self._warm_up()

    # ---- growth, with the call-agreement check ---------------------------------------------------
    def reserve(self, nbytes_per_parity: int, *, timeout_s: float, signature: tuple[int, ...]) -> None:
        """Grow the workspace for the fused call with ``signature`` if it needs more room (collective).

        Before it waits for the peers, a growing rank writes ``signature``, with its ready flag for
        the next epoch, into every peer's flags, and while it waits it watches the peers' ready
        flags: a peer that is in that call without growing (it disagrees about the shapes) and this
        rank both raise :class:`~fluxlite.FluxliteCallMismatchError` at once instead of timing out.
        A failure poisons this state.
        """
        ws = self.ws
        if nbytes_per_parity <= ws.capacity:
            return
        if self.captured:
            raise FluxliteError(
                f"fluxlite: this call needs the workspace to grow from {ws.capacity} to {nbytes_per_parity} bytes "
                f"per data half, but a CUDA graph has captured fused calls on it and would replay into the freed "
                f"buffers{' (and it cannot grow during capture)' if _workspace.capturing(ws.device) else ''}: warm up with the largest "
                f"shapes before capturing, or call fluxlite.release_workspaces() on every rank and capture again")
        try:
            # Our device and producer are done with the old buffers before the announcement and the
            # exchange: no call of ours can still read the slots written below.
            self.drain(timeout_s)
            abort = None
            if ws.capacity:
                self._announce(signature)
                abort = lambda: self._raise_if_peer_in_another_call(signature)  # noqa: E731
            ws.reserve(nbytes_per_parity, timeout_s=timeout_s, epoch=self.epoch, abort=abort)
        except BaseException as exc:
            self.poison(exc)
            raise
        for plan in self.plans.values():
            plan.bound.clear()  # views of the old buffers would keep them alive
        self._bind()  # now: the alignment kernel may first run under capture, which cannot copy to the device

    def _announce(self, signature: tuple[int, ...]) -> None:
        """Write ``signature`` and the ready flag of the next call into every peer's flags (after
        :meth:`drain`, so no call of ours that could still read those slots is in flight). The
        workspace grows only while nothing was captured, so the host's next parity is the device's."""
        ws = self.ws
        parity = (self.epoch + 1) % 2
        at = sch.signature_slot(ws.world_size, parity, ws.rank)
        ready = sch.region_start(ws.world_size, parity) + sch.ready_slot(ws.rank)
        words = torch.tensor(signature, dtype=torch.int32)
        for p in range(ws.world_size):
            if p != ws.rank:
                ws.flags(p)[at : at + sch.SIG_WORDS].copy_(words)
                if ws.is_cuda:
                    torch.cuda.current_stream(ws.device).synchronize()  # the signature lands before the flag
                ws.flags(p)[ready] = sch.SET
        if ws.is_cuda:
            torch.cuda.current_stream(ws.device).synchronize()

    def _raise_if_peer_in_another_call(self, signature: tuple[int, ...]) -> None:
        ws = self.ws
        parity = (self.epoch + 1) % 2
        mine = ws.flags(ws.rank)
        base = sch.region_start(ws.world_size, parity)
        for p in range(ws.world_size):
            if p != ws.rank and int(mine[base + sch.ready_slot(p)]) >= sch.SET:
                at = sch.signature_slot(ws.world_size, parity, p)
                theirs = tuple(mine[at : at + sch.SIG_WORDS].tolist())
                if theirs != tuple(signature):
                    raise FluxliteCallMismatchError(
                        rank=ws.rank, peer=p, theirs=sch.describe_signature(theirs),
                        mine=f"{sch.describe_signature(signature)}, which grows the workspace")

    # ---- calls, parities and failure ----------------------------------------------------------
    def next_epoch(self) -> int:
        """Start a call (after :meth:`check`, which the ops make before they may grow): the new call
        number (its parity is ``epoch % 2``; the number itself only names the call in the host's
        errors: a CUDA kernel's record names the device's count, :attr:`sequence`, which is the same
        number until a user's graph replays fused calls)."""
        self.epoch += 1
        return self.epoch

    @property
    def null_calls(self) -> int:
        """Parity-alignment null calls run so far (reads the device; for tests and diagnostics)."""
        return int(self.sequence[1])

    def _bind(self) -> tuple:
        """``(flag region views per parity, int64 [W] every rank's flag array address, int64 [W]
        every rank's data half address per parity)`` (addresses as mapped here, on the workspace's
        device) for the workspace's current buffers, made once per generation (a growth moves them)."""
        ws = self.ws
        if self._bound[0] != ws.generation:
            flags, W = ws.flags(ws.rank), ws.world_size

            def addresses(of) -> torch.Tensor:
                return torch.tensor([of(p) for p in range(W)], dtype=torch.int64).to(ws.device)

            regions = tuple(flags[sch.region_start(W, p):] for p in (0, 1))
            data = tuple(addresses(lambda p, parity=parity: ws.data_addr(p, parity)) for parity in (0, 1))
            self._bound = (ws.generation, regions, addresses(ws.flag_addr), data)
        return self._bound[1:]

    def signal_copy(self) -> producer.SignalCopy:
        """How this rank's CUDA producer sets a peer's flag right after a copy: by copying
        :attr:`set_word` (:class:`fluxlite.fused.producer.SignalCopy`); its own flags, at the
        workspace's current addresses, stay stream writes."""
        own = self.ws.flags(self.ws.rank)
        return producer.SignalCopy(self.set_word.data_ptr(), range(own.data_ptr(), own.data_ptr() + own.nbytes))

    def scratch(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A ``shape`` tensor of this rank's own memory (no peer maps it) for a call's working data,
        GEMM-RS's partials before they leave: one buffer per state, grown to the largest call and
        kept, so that a recurring call finds it at the same address. An eager call replays from a
        graph keyed by its tensors' addresses (:meth:`fluxlite.fused.Call.run`); with a fresh
        allocation per call, the address moved with whatever else the program had allocated
        meanwhile, and a call that did not recur back to back (one call at a time between other
        work) ran uncaptured, at two or three times its replayed cost. Calls on a state are stream-
        ordered, so one buffer serves them all. Under a capture that needs it larger, the capture's
        own allocation is used instead (its graph keeps it); a buffer a user's graph may still
        replay into is kept when it is replaced."""
        key = (shape, dtype)
        view = self._scratch_views.get(key)
        if view is not None:
            return view
        nbytes = max(1, dtype.itemsize * math.prod(shape))
        if self._scratch is None or self._scratch.numel() < nbytes:
            if _workspace.capturing(self.ws.device):
                return torch.empty(shape, dtype=dtype, device=self.ws.device)
            if self.captured and self._scratch is not None:
                self._retired_scratch.append(self._scratch)
            with _workspace.lasting():
                self._scratch = torch.empty(nbytes, dtype=torch.uint8, device=self.ws.device)
            self._scratch_views.clear()
        if len(self._scratch_views) >= MAX_SCRATCH_VIEWS:  # calls of ever new shapes (varying M)
            self._scratch_views.clear()
        with _workspace.lasting():  # a dtype view kept for later calls
            view = self._scratch_views[key] = self._scratch[:nbytes].view(dtype).view(shape)
        return view

    def region(self, parity: int) -> torch.Tensor:
        """int32 view of this rank's flag region ``parity`` followed by the signature slots: the
        fused kernels' flag array (:func:`fluxlite.schedule.region_start`)."""
        return self._bind()[0][parity]

    def flag_bases(self) -> torch.Tensor:
        """int64 ``[W]``: every rank's flag array, as mapped here (a kernel that sets peers' flags)."""
        return self._bind()[1]

    def data_bases(self, parity: int) -> torch.Tensor:
        """int64 ``[W]``: every rank's data half ``parity``, as mapped here (a kernel that reads the
        peers' buffers)."""
        return self._bind()[2][parity]

    def align_args(self, parity: int, timeout_s: float, signature: torch.Tensor, ready: bool) -> dict:
        """CUDA: the arguments of a call's alignment (:func:`fluxlite.kernels.align.launch` but its
        ``cache``), for the alignment kernel or a kernel that starts the call itself
        (:mod:`fluxlite.kernels.push_rows`)."""
        return align.arguments(state=self.sequence, flag_bases=self.flag_bases(), error=self.error,
                               counters=self.counters, signature=signature, parity=parity, rank=self.ws.rank,
                               world_size=self.ws.world_size, ready=ready, timeout_s=timeout_s)

    def align(self, parity: int, call: int, timeout_s: float, signature: torch.Tensor, ready: bool) -> None:
        """Start call ``call`` of parity ``parity``: count it, zero the tile counters, clear the
        previous call's flags, make the device's call sequence alternate parities, and announce the
        call to every peer: ``signature`` (int32 ``[SIG_WORDS]`` on the workspace's device), then,
        with ``ready``, the ``ready`` flag (:mod:`fluxlite.kernels.align`). CUDA: the alignment
        kernel, on the current stream (in a graph it replays with the graph). CPU (no graphs; tests
        make the host skip a parity): the same steps on the host, whose count is then the host's."""
        ws, W, r = self.ws, self.ws.world_size, self.ws.rank
        if ws.is_cuda:
            align.launch(**self.align_args(parity, timeout_s, signature, ready), cache=self._align_kernels)
            return
        sig_at = sch.signature_slot(W, parity, r)
        ready_at = sch.region_start(W, parity) + sch.ready_slot(r)
        self.sequence[2] += 1
        self.counters.zero_()
        self._clear(1 - int(self.sequence[0]))
        if int(self.sequence[0]) != parity:
            self._null_call(1 - parity, call, timeout_s)
        for p in range(W):
            if p != r:  # x86 keeps the order of these stores for every reader (fluxlite.host_flags)
                ws.flags(p)[sig_at : sig_at + sch.SIG_WORDS].copy_(signature)
                if ready:
                    host_store(ws.flag_addr(p, ready_at), sch.SET)
        self.sequence[0] = 1 - parity

    def _null_call(self, parity: int, call: int, timeout_s: float) -> None:
        ws, W, r = self.ws, self.ws.world_size, self.ws.rank
        base = sch.region_start(W, parity)
        for p in range(W):
            if p != r:
                host_store(ws.flag_addr(p, base + sch.ready_slot(r)), sch.SET)
        deadline = time.monotonic() + timeout_s
        for p in range(W):
            if p != r:
                host_wait(ws.flag_addr(r, base + sch.ready_slot(p)), sch.SET, deadline=deadline, timeout_s=timeout_s,
                          op="fused call", what="its arrival at a parity-alignment call", rank=r, peer=p,
                          chunk=-1, epoch=call)
        self._clear(parity)
        self.sequence[1] += 1

    def _clear(self, parity: int) -> None:
        """CPU: clear this rank's flag region ``parity``, once every flag a peer set there in the call
        that used it is consumed (at the start of the next call, :meth:`align`)."""
        self.region(parity)[: sch.region_slots(self.ws.world_size)].zero_()

    def poison(self, exc: BaseException, *, raised: bool = True) -> None:
        """Mark the workspace unusable for fused calls after a failure: peers' flags and buffers no
        longer agree.

        ``raised=False`` when the failure (a GPU kernel's record) has not been raised to the caller
        yet: the next :meth:`check` raises it as it is, later ones raise "poisoned".
        """
        if self._poison is None:
            self._poison, self._poison_raised = exc, raised

    def check(self) -> None:
        """Raise if an earlier call (or a growth of the workspace) failed, including a failure a GPU
        kernel recorded: the kernel copies its record to a mirror in host memory, read here without
        blocking (:mod:`fluxlite.kernels.device_flags`)."""
        if self._poison is None and self.ws.failed is not None:
            self.poison(self.ws.failed)
        if self.ws.is_cuda and self._poison is None and self._err_code.value:
            self._poison_from_record(self._err_host.tolist())
        if self._poison is None:
            return
        if not self._poison_raised:
            self._poison_raised = True
            raise self._poison
        raise FluxliteError(
            f"fluxlite workspace is poisoned by an earlier failure: {self._poison} -- call "
            f"fluxlite.release_workspaces() on every rank, then retry"
        ) from self._poison

    def read_kernel_error(self, timeout_s: float) -> None:
        """Read the kernel error record now (blocking); a recorded failure poisons the workspace."""
        self._timeout_s = timeout_s
        self._poison_from_record(self.error.tolist())

    def _poison_from_record(self, rec: list[int]) -> None:
        exc = exception_from_record(rec, rank=self.ws.rank, world_size=self.ws.world_size, timeout_s=self._timeout_s)
        if exc is not None:
            self.poison(exc, raised=False)

    def note_timeout(self, timeout_s: float) -> None:
        """The timeout of the latest call: the one a failure its kernel records will name."""
        self._timeout_s = timeout_s

    def synchronize(self) -> None:
        """Wait (bounded) for this workspace's device work; raise the failure of any earlier call,
        including a call replayed from a CUDA graph (the record is read here)."""
        if self.ws.is_cuda:
            self.drain(self._timeout_s or resolve_timeout(None))
            self._poison_from_record(self.error.tolist())
        self.check()

    def drain(self, timeout_s: float) -> None:
        """CUDA: wait (bounded, :func:`~fluxlite.workspace.wait_idle`) until the caller's stream and
        the producer stream are idle."""
        if self.ws.is_cuda:
            wait_idle([torch.cuda.current_stream(self.ws.device), self.producer_stream], self.ws, timeout_s)

    def capture(self, enqueue) -> Replay:
        """A CUDA graph of what ``enqueue()`` enqueues on the current stream, made the capture stream
        here (an eager call's work, to replay). ``thread_local``: other threads' CUDA calls (a gloo
        or NCCL worker) neither break the capture nor are broken by it."""
        # torch's allocator cannot capture into a pool whose graphs are all gone (an internal assert in
        # capture_begin, which also leaves the RNG believing a capture is under way: every later
        # torch.randn raises). They all go when the workspace grows (the plans' Bindings drop them)
        # or when the pool's first capture fails, so each generation, and each capture after a
        # failure, starts a new pool.
        if self._graph_pool is None or self._graph_pool[1] != self.ws.generation:
            self._graph_pool = (torch.cuda.graph_pool_handle(), self.ws.generation)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(self._capture_stream):
                graph.capture_begin(pool=self._graph_pool[0], capture_error_mode="thread_local")
                try:
                    enqueue()
                finally:
                    graph.capture_end()
        except BaseException:
            self._graph_pool = None
            raise
        return Replay(graph, graph.raw_cuda_graph_exec())

    # ---- the producer -------------------------------------------------------------------------
    def submit(self, fn, *args, **kwargs):
        """CPU: run ``fn`` on the producer thread (the CPU's side stream); returns a Future."""
        return self._executor.submit(fn, *args, **kwargs)

    def _warm_up(self) -> None:
        """Run every producer-side operation once while nothing spins: with lazy module loading, the
        first launch of a kernel beside a spinning consumer can deadlock (docs/safety.md)."""
        ws, stream = self.ws, self.producer_stream
        scratch = torch.empty(2, 64, dtype=torch.uint8, device=ws.device)
        with torch.cuda.stream(stream):
            scratch[1].copy_(scratch[0])
            peer = ws.data((ws.rank + 1) % ws.world_size, 0, (64,), torch.uint8)
            scratch[0].copy_(peer)
            word = self.counters.data_ptr()
            handle = stream.cuda_stream
            cu.stream_batch_mem_op(handle, cu.mem_op_batch([(False, word, 0), (True, word, 0)]))
            cu.memcpy_async(handle, scratch.data_ptr(), scratch.data_ptr() + 64, 64)
            # The alignment kernel on its no-op branch, compiled and loaded now, not beside a
            # spinning consumer: as if alone (no peer to announce to), on flags of its own (a peer
            # may already have announced its first call in ours, which a clear here would lose).
            self.sequence[:1].fill_(0)
            W = ws.world_size
            own = torch.zeros(sch.num_flag_slots(W), dtype=torch.int32, device=ws.device)
            alone = torch.tensor([own.data_ptr()], dtype=torch.int64).to(ws.device)
            signature = torch.zeros(sch.SIG_WORDS, dtype=torch.int32, device=ws.device)

            def alone_call(parity: int) -> dict:
                """Rank 0 alone (no peer, no ready flag to set) on flags of its own laid out for W
                ranks, so that the kernels compiled are those the calls launch."""
                slots = align.arguments(state=self.sequence, flag_bases=alone, error=self.error,
                                        counters=self.counters, signature=signature, parity=parity, rank=0,
                                        world_size=W, ready=False, timeout_s=self._timeout_s)
                return dict(slots, world_size=1)

            align.launch(**alone_call(0), cache=self._align_kernels)
            # GEMM-AllReduce's gather end, likewise: alone, no split to wait for or move.
            nothing = torch.zeros(1, 16, dtype=torch.bfloat16, device=ws.device)
            gather_end.launch(out=nothing, data_bases=alone, flag_bases=alone, bounds=own[:1], error=self.error,
                              call=self.call_number, rank=0, world_size=1, gathered=0, chunk_rows=1, region=0,
                              reduced_at=sch.reduced_slot(W, 0, 0), timeout_s=self._timeout_s, sms=1,
                              cache=self.gather_kernels)
            # AG-GEMM's gather by the SMs, likewise: its alignment on the no-op branch (the device
            # expects parity 1 after the alignment kernel above), no peer to push to, wait for or
            # announce to.
            push_rows.launch(src=scratch.data_ptr(), nbytes=16, data_bases=alone, count=self.push_count, dst_offset=0,
                             first_slot=0, splits=1, wait=True, sig_base=0, sms=1, cache=self.push_kernels,
                             alignment=alone_call(1))
            # The matmul consumers' bounded wait for the peers' data, likewise.
            split_wait.launch(flags=own, sig=torch.zeros(sch.SIG_WORDS, dtype=torch.int32, device=ws.device),
                              error=self.error, call=self.call_number, first=sch.data_slot(W, 0, 0),
                              peer_stride=sch.peer_slots(), rank=0, world_size=1, sig_base=0,
                              timeout_s=self._timeout_s, cache=self.split_wait_kernels)
            self.sequence[:1].fill_(1)  # the first call's parity; no null calls counted
            self.sequence[2:].fill_(0)  # nor calls
        self.drain(self._timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Wait (bounded) until the producer and our device work can no longer touch the buffers."""
        timeout_s = resolve_timeout(timeout_s)
        try:
            if self.ws.is_cuda:
                self.drain(timeout_s)
            else:
                self._executor.shutdown(wait=True)  # its waits end at their deadlines
        finally:
            for plan in self.plans.values():  # its views keep the buffers alive, its graphs address them
                plan.bound.clear()
            self.plans = {}
            self._scratch, self._scratch_views, self._retired_scratch = None, {}, []
            if self.ws.is_cuda:
                self._graph_pool = None
            self.closed = True  # what a call kept of this state (fluxlite.ops.op.Repeat) is void


def state_of(ws: SymmetricWorkspace, timeout_s: float | None = None) -> FusedState:
    """The fused state of ``ws``, made on first use (CUDA: its producer operations are warmed up
    then, bounded by ``timeout_s``) with the options the environment gives at that moment."""
    if ws.is_cuda:
        # Before any CUDA call of the fused layer: a thread that never made one (autograd's backward
        # thread) may have no context current, and driver calls (or a launch) then fail or crash.
        cu.ensure_context(ws.device.index)
    state = PROCESS.fused_states.get(ws)
    if state is None:
        if _workspace.capturing(ws.device):
            raise FluxliteError(
                "fluxlite: a fused call is being captured in a CUDA graph before any fused call ran on this "
                "workspace: run each fused call once eagerly (with the shapes you capture) before capturing")
        state = PROCESS.fused_states[ws] = FusedState(
            ws, resolve_timeout(timeout_s), consumer=os.environ.get("FLUXLITE_CPU_CONSUMER", "torch"),
            blocking=os.environ.get("FLUXLITE_BLOCKING", "0") not in ("", "0"))
    return state


def states_of(group: dist.ProcessGroup) -> list[FusedState]:
    """The fused states of ``group``'s workspaces (one per device that ran a fused call)."""
    return [state for ws, state in PROCESS.fused_states.items() if ws.tp.group is group]


def forget_states() -> list[FusedState]:
    """Forget every fused state; returns them for :func:`fluxlite.release_workspaces` to close."""
    states = list(PROCESS.fused_states.values())
    PROCESS.fused_states.clear()
    return states


def synchronize(group: dist.ProcessGroup | None = None) -> None:
    """Wait for this rank's fused work on ``group`` and raise any timeout a kernel recorded."""
    from ..group import resolve_group

    for state in states_of(resolve_group(group).group):
        state.synchronize()


def release_workspaces(timeout: float | None = None) -> None:
    """Drop every cached workspace. Call it on every rank: before destroying the process group, and
    after any fluxlite error, to recover (the next fused call builds a fresh workspace).

    It first waits (bounded by ``timeout``) until no device work or producer thread of ours can
    still touch the buffers: the fused layer's producers stop first, then the buffers go.
    """
    errors = []
    for owner in (*forget_states(), *_workspace.forget_workspaces()):
        try:
            owner.close(timeout)
        except BaseException as exc:  # release the rest all the same
            errors.append(exc)
    if errors:
        raise errors[0]
