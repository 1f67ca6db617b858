"""The producer: a program of copies and flag operations that moves one fused call's data, run
beside the consumer GEMM. One program, two devices:

- CPU: a worker thread. ``copy`` is a memmove between mapped addresses, ``signal`` a store to a
  mapped int32, ``wait`` a spin with the call's deadline.
- CUDA: a high-priority side stream. ``copy`` is a copy-engine copy (peers' memory is mapped),
  ``signal`` a 32-bit stream write (which fences first), ``wait`` a 32-bit stream wait; a run of
  signals and waits with no copy between them is one ``cuStreamBatchMemOp`` call, in order (one
  node of a captured graph, not one per flag). A signal to a peer's flag right after a copy, with
  no flag operation after it to share a batch with (AG push's per split), is instead a 4-byte
  copy-engine copy of a word that holds SET (:class:`SignalCopy`): it starts once the copy before
  it on the stream has completed, as a stream write would, and a graph of copies and kernels
  launches faster than one with memop nodes, and runs its small calls faster.
  Until the consumer has finished no SM is needed, so a persistent GEMM that holds every SM can
  never starve its own producer.

A program is a list of steps on raw addresses (so a step costs a driver call, not a tensor view
and a torch dispatch): ``(COPY, dst, src, nbytes)``, ``(SIGNAL, address, value)``,
``(WAIT, address, value, info)``, where ``info`` names what the wait is for (error messages),
and ``(STAGE, dst, src, nbytes)``: a copy within this rank's memory that a peer waits on (AG pull's
staging). Work on the consumer's whole output, after it, is no step: it is the call's ``end``
(:meth:`fluxlite.fused.Call.run`), which runs behind both. No value depends on the call (flags are set to
:data:`fluxlite.schedule.SET` and cleared by their owner; the call's signature and ``ready`` flag go
out in its alignment step, not here), so one program, built once per plan, data half and addresses
of the call's own tensors, serves every call, and a program captured in a CUDA graph replays
correctly.

A copy within one GPU may run on its SMs (the driver picks), and the persistent consumer can hold
every SM while it waits: a same-device copy that a peer's consumer waits on, behind a consumer
that waits on that peer, is a deadlock that only a timeout ends (measured on two H200s: one AG pull
call in 40-80). So such a copy is a STAGE, which on CUDA runs on the caller's stream after the
alignment kernel and before the consumer and the producer's first step (:attr:`Program.staged`);
a same-device COPY that nothing waits on goes last.

A CUDA stream wait has no timeout, so a WAIT may only wait on what a bounded kernel of this rank
produces or releases: its own tile counters, or flags its consumer sets itself when its own wait
fails (AG pull's ``ready``). A wait on anything a peer alone sets is a bounded kernel's, in the
consumer or in the call's ``end``.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch

from .. import _cuda_driver as cu
from .. import schedule as sch
from ..host_flags import host_store, host_wait

COPY, STAGE, SIGNAL, WAIT = "copy", "stage", "signal", "wait"


def first_wait(steps: list) -> int:
    """Index of the first WAIT step (``len(steps)`` if none)."""
    return next((i for i, step in enumerate(steps) if step[0] == WAIT), len(steps))


FLAGS = "flags"  # a stream call: a run of signals and waits as one memop batch


class SignalCopy(NamedTuple):
    """How a CUDA program writes a peer's flag right after a copy (:func:`stream_calls` says when):
    a copy-engine copy of the int32 at ``word`` (this rank's memory, holding
    :data:`fluxlite.schedule.SET`). Flags at addresses in ``own`` (this rank's flag array) stay
    stream writes: a copy within one GPU may run on SMs that the consumer holds (STAGE, below)."""

    word: int
    own: range


def stream_calls(steps: list, signal_copy: SignalCopy | None = None, after_copy: bool = False,
                 counted_waits: bool = False) -> list:
    """``steps`` as the calls that enqueue them: ``(COPY, dst, src, nbytes)``, ``(FLAGS, batch)`` for
    each run of signals and waits (:func:`fluxlite._cuda_driver.mem_op_batch`); with ``signal_copy``,
    a SIGNAL of SET to a peer's flag between a COPY and anything but another flag operation (which it
    would share a batch with) is ``(COPY, flag, signal_copy.word, 4)`` (``after_copy``: the step
    before ``steps[0]`` was a COPY);
    ``counted_waits``: a WAIT is ``(WAIT, address)``, a wait for the event that a consumer of many
    launches records where it counts that counter (:class:`Feed`)."""
    calls, run = [], []

    def end_run() -> None:
        if run:
            calls.append((FLAGS, cu.mem_op_batch(run)))
            run.clear()

    for i, step in enumerate(steps):
        if step[0] == COPY:
            end_run()
            calls.append(step)
            continue
        if counted_waits and step[0] == WAIT:
            end_run()
            calls.append((WAIT, step[1]))
            continue
        follows_copy = steps[i - 1][0] == COPY if i else after_copy
        alone = i + 1 == len(steps) or steps[i + 1][0] not in (SIGNAL, WAIT)  # else it shares a batch
        if (signal_copy and step[0] == SIGNAL and step[2] == sch.SET and follows_copy and alone
                and step[1] not in signal_copy.own):
            end_run()
            calls.append((COPY, step[1], signal_copy.word, 4))
            continue
        if len(run) == cu.MAX_BATCH:
            end_run()
        run.append((step[0] == WAIT, step[1], step[2]))
    end_run()
    return calls


def pieces(steps: list, signal_copy: SignalCopy | None = None) -> list[tuple[str, int, list]]:
    """``steps`` cut before every WAIT, and before a SIGNAL that follows a COPY, each piece as
    ``(kind, address, stream calls)``: ``kind`` is its first step's (``address`` that of a WAIT,
    else 0), and its waits are on counts' events (:func:`stream_calls`'s ``counted_waits``). What
    :class:`Feed` enqueues a piece at a time."""
    out, piece = [], []
    for step in steps:
        cut = step[0] == WAIT or (step[0] == SIGNAL and piece and piece[-1][0] == COPY)
        if cut and piece:
            out.append(piece)
            piece = []
        piece.append(step)
    if piece:
        out.append(piece)
    return [(p[0][0], p[0][1] if p[0][0] == WAIT else 0,
             stream_calls(p, signal_copy, i > 0 and out[i - 1][-1][0] == COPY, True))
            for i, p in enumerate(out)]


class Feed:
    """A CUDA producer program enqueued piece by piece as a consumer of several launches goes (the
    matmul consumer: :meth:`fluxlite.ops.gemm_rs.GemmReduceScatter._consume_by_matmul`), not all of
    it after the consumer.

    Streams may share one hardware queue (always with ``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron
    sets), which runs its work in the order it was enqueued: a launch that waits for an earlier one
    of its stream holds back everything behind it. A consumer of one kernel leaves the queue at once;
    one of many launches, some of them waits on the peers, would hold the producer's steps behind
    those waits, and the peers wait for those steps: a deadlock. So the consumer calls
    :meth:`counted` once it has enqueued the launches that a counter counts, which records the
    counter's event behind them and enqueues the producer's wait for it and the copy behind it (the
    wait is then satisfied in queue order), and :meth:`waiting` before it
    enqueues a wait on the peers' split ``s``. A copy's signals are held back until the consumer's next
    count, or its wait on a split at least as late as theirs: a signal waits for its copy, so in one
    queue the consumer's next GEMM starts while the copy runs, and a rank's signals of split ``s`` are
    ahead of its own wait on split ``s``, which is what the peers' waits on split ``s`` need
    (tests/test_feed.py).

    A count is an event, not a write to the counter: recording one and waiting for it cost the host
    what a stream write and a stream wait do, and in a captured graph they are an edge between the
    GEMM and the copy, not two nodes, so a replay launches fewer nodes."""

    def __init__(self, program_pieces: list, stream: int, main: int = 0, events: dict[int, int] | None = None) -> None:
        self.pieces, self.stream, self.main, self.next = program_pieces, stream, main, 0
        self.events = events or {}  # counter address -> raw event handle
        self.held, self.held_split = None, 0
        self.written: set[int] = set()
        self.awaited = {address for kind, address, _ in program_pieces if kind == WAIT}

    def counted(self, address: int, split: int) -> None:
        """The consumer has enqueued the last launch that counts into the counter at ``address`` (of
        split ``split``): its event is recorded behind it on the consumer's stream, and the producer
        steps that wait for it go on the producer stream."""
        event = self.events.get(address)
        if event is not None and address in self.awaited:  # nothing waits on the last count of a second shot
            cu.event_record(event, self.main)
        self.written.add(address)
        self._release()
        while self.next < len(self.pieces):
            kind, wait_address, calls = self.pieces[self.next]
            if kind == SIGNAL and self.held is None:
                self.held, self.held_split = calls, split
            elif kind == WAIT and wait_address in self.written:
                enqueue_on_stream(calls, self.stream, self.events)
            else:
                return
            self.next += 1

    def waiting(self, split: int) -> None:
        """The consumer is about to enqueue a wait on the peers' split ``split``."""
        if self.held is not None and self.held_split <= split:
            self._release()

    def _release(self) -> None:
        if self.held is not None:
            enqueue_on_stream(self.held, self.stream)
            self.held = None

    def rest(self) -> list:
        """The stream calls not enqueued yet, in order (for after the consumer)."""
        held = self.held or []
        self.held = None
        return held + [call for _, _, calls in self.pieces[self.next:] for call in calls]


class Program(NamedTuple):
    """A producer program with where its first wait is, found once when it is built (:meth:`of`),
    and on CUDA its driver calls before and after that wait (:func:`stream_calls`), and its STAGE
    copies, which go on the caller's stream before the consumer."""

    steps: list
    first_wait: int  # steps before it go ahead of the consumer kernel on CUDA
    on_stream: tuple[list, list | None] | None = None  # (before the first wait, after it; None when fed)
    staged: tuple = ()  # CUDA: the STAGE steps, as (dst, src, nbytes)
    pieces: list | None = None  # CUDA, for a consumer of many launches: the rest, as pieces (:class:`Feed`)

    @classmethod
    def of(cls, steps: list, cuda: bool = False, fed: bool = False, signal_copy: SignalCopy | None = None) -> "Program":
        """``steps`` as a program; ``cuda``: with its stream calls (``signal_copy``: see
        :func:`stream_calls`); ``fed``: and its pieces, for a consumer that takes the producer as it
        goes (:class:`Feed`)."""
        at = first_wait(steps)
        staged = tuple(step[1:] for step in steps if step[0] == STAGE)
        if any(step[0] != STAGE for step in steps[:len(staged)]):
            raise ValueError("a producer program's STAGE steps come first")
        rest = steps[len(staged):]
        at_rest = at - len(staged)
        after = rest[at_rest:]
        on_stream = (stream_calls(rest[:at_rest], signal_copy),
                     None if fed else stream_calls(after, signal_copy)) if cuda else None
        return cls(steps, at, on_stream, staged,
                   pieces(after, signal_copy) if cuda and fed else None)


def run_on_thread(steps: list, **wait_info) -> None:
    """Run ``steps`` here (the CPU producer thread); every wait bounded by ``wait_info['deadline']``
    (``wait_info['epoch']`` names the call in a timeout)."""
    with torch.no_grad():
        for step in steps:
            if step[0] in (COPY, STAGE):
                ctypes.memmove(step[1], step[2], step[3])
            elif step[0] == SIGNAL:
                host_store(step[1], step[2])
            else:
                host_wait(step[1], step[2], **wait_info, **step[3])


def enqueue_on_stream(calls: list, stream: int, events: dict[int, int] | None = None) -> None:
    """Enqueue ``calls`` (:func:`stream_calls`) on the raw CUDA ``stream`` handle; returns at once. A
    counted wait ``(WAIT, address)`` waits for ``events[address]``."""
    for call in calls:
        if call[0] == COPY:
            cu.memcpy_async(stream, call[1], call[2], call[3])
        elif call[0] == WAIT:
            cu.stream_wait_event(stream, events[call[1]])
        else:
            cu.stream_batch_mem_op(stream, call[1])
