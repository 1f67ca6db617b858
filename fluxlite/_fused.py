"""Fused AG-GEMM and GEMM-RS: a producer program of copies and flag operations, and a consumer GEMM
whose row blocks wait on (AG) or signal (RS) those flags. Same protocol on CPU and CUDA.

Producer steps are built once per call from the :class:`~fluxlite.schedule.TileSchedule` and run
by the device's producer:

- CUDA: a high-priority side stream. ``copy`` is a copy-engine ``cudaMemcpyAsync`` (peers' memory
  is mapped), ``signal`` is ``cuStreamWriteValue32`` (fences first), ``wait`` is
  ``cuStreamWaitValue32``. No SM is needed, so a persistent GEMM that holds every SM can never
  starve its own producer.
- CPU: one worker thread. ``wait`` spins with a deadline.

The consumer is the persistent Triton kernel (:mod:`fluxlite.kernels.fused_gemm`) on CUDA, and on
CPU either that same kernel under the Triton interpreter or a loop of ``torch.matmul`` per row block
that performs the same waits.

AG-GEMM (rank ``r``, call ``e``, data parity ``e % 2``). The consumer reads its own rows in place
from ``a`` (``Tuning.ag_local_in_place``; else the producer first copies them into ``gathered[r]``
split by split, flagging each) and each peer's from ``gathered`` once flagged::

    push (the caller does not keep the gathered input; ``gathered`` is our symmetric buffer):
      producer: for p in r-1, r-2, ...: p.gathered[r] <- a, split by split, p.flag (r, s) = e
    pull (``gathered`` is a fresh tensor that the caller keeps, e.g. for a backward):
      producer: staging[r] <- a;  every peer p: p.ready[r] = e          # our rows may now be pulled
                gathered[r] <- a                                        # for the caller
                for p in r+1, r+2, ...: wait ready[p] >= e
                                        gathered[p] <- p.staging, split by split, flag (p, s) = e
                (Tuning.ag_producer = "sm": an SM-copy kernel runs that loop instead)
    consumer: for each row block (schedule order): peers' blocks wait flag (chunk, split) >= e;
              out = A @ W.T + b

GEMM-RS, by transport (``Tuning.rs_transport``; ``recv`` and the pulled ``partial`` are symmetric)::

    consumer: blocks of peer chunk d: partial tile -> see below; counter (d, s) += 1
              blocks of our chunk: wait every peer's recv flag (p, s) >= e; out = A @ W.T + sum_p recv[p] + b
    push:     consumer stores into partial[d]
              producer: for d in r+1, ...: for s: wait counter (d, s) == tiles of (d, s)
                                                  d.recv[r] <- partial[d] rows of s; d.recv flag (r, s) = e
    pull:     consumer stores into partial[d]; the tile completing (d, s) sets d.staged flag (r, s) = e
              producer: for p in r-1, r-2, ...: for s: wait staged flag (p, s) >= e
                                                       recv[p] <- p.partial[r] rows of s; recv flag (p, s) = e
    remote:   consumer stores into d.recv[r]; the tile completing (d, s) sets d.recv flag (r, s) = e
              producer: nothing
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from . import schedule as sch
from . import tune
from .flags import host_set_flag, host_wait_flag
from .kernels import fused_gemm as kern
from .kernels import pull_chunks as pull_kern
from ._sequential import linear_into
from .workspace import SymmetricWorkspace

CPU_BLOCK_M = 64  # rows per block for the CPU torch consumer
COPY, SIGNAL, WAIT, KERNEL = "copy", "signal", "wait", "kernel"


@dataclass
class Tuning:
    """Knobs the benchmarks turn to compare variants (defaults are what users get)."""

    splits: int | None = None  # splits per chunk; None: schedule.default_splits
    config: kern.GemmConfig | None = None  # CUDA kernel blocks; None: tune.choose_config
    rs_dynamic: bool = True  # GEMM-RS claims tiles from an atomic counter (see the kernel's docstring)
    rs_early_reduce: bool = False  # GEMM-RS local tiles start from the peers' partials (kernel docstring)
    rs_defer_publish: bool = True  # GEMM-RS counts a stored partial tile after the next main loop (kernel)
    rs_transport: str = "push"  # how GEMM-RS partials travel: "push", "pull" or "remote" (module docstring)
    ag_push: bool = True  # AG without return_gathered pushes our rows into the peers' symmetric buffers
    ag_local_in_place: bool = True  # the AG kernel reads our own rows from ``a`` (no copy, no wait)
    ag_producer: str = "copy_engine"  # who pulls AG's peer rows: "copy_engine" or "sm" (kernels/pull_chunks.py)
    pull: pull_kern.PullConfig = pull_kern.PullConfig()  # the SM producer's tiles and programs


TUNING = Tuning()


def cpu_consumer() -> str:
    """CPU consumer: ``torch`` (default; per-block matmul) or ``triton`` (the GPU kernel, interpreted)."""
    name = os.environ.get("FLUXLITE_CPU_CONSUMER", "torch")
    if name not in ("torch", "triton"):
        raise ValueError(f"FLUXLITE_CPU_CONSUMER must be 'torch' or 'triton', got {name!r}")
    return name


def _kernel_config(ws: SymmetricWorkspace, op: str, gemm_shape: tuple[int, int, int], a, weight) -> kern.GemmConfig:
    """``TUNING.config`` if set, else the autotuned config for this rank's GEMM ``gemm_shape = (M, K, N)``."""
    if ws.device.type == "cuda" and TUNING.config is not None:
        return TUNING.config
    M, K, N = gemm_shape
    return tune.choose_config(op, M=M, K=K, N=N, dtype=a.dtype, b_kmajor=not weight.is_contiguous(),
                              device=ws.device)


def _splits(block_m: int, chunk_rows: int) -> int | None:
    if TUNING.splits is None:
        return None
    return max(1, min(TUNING.splits, sch.MAX_SPLITS, -(-chunk_rows // block_m)))


# ---- producers ---------------------------------------------------------------------------------


def _run_steps(steps, signal, wait) -> None:
    """Run producer steps in order; ``signal(flags, slot, value)`` and ``wait(flags, slot, value, info)``
    are the device's flag operations (host stores and spins on CPU, stream memory operations on CUDA)."""
    for step in steps:
        if step[0] == KERNEL:
            step[1]()
        elif step[0] == COPY:
            step[1].copy_(step[2])
        elif step[0] == SIGNAL:
            signal(*step[1:])
        else:
            wait(*step[1:])


def _run_steps_on_thread(steps, **wait_info) -> None:
    _run_steps(steps, host_set_flag,
               lambda flags, slot, value, info: host_wait_flag(flags, slot, value, **wait_info, **info))


def _enqueue_steps_on_stream(steps, stream: torch.cuda.Stream) -> None:
    from ._cuda_driver import stream_wait_value32, stream_write_value32

    with torch.cuda.stream(stream):
        _run_steps(steps, lambda flags, slot, value: stream_write_value32(stream, flags.data_ptr() + 4 * slot, value),
                   lambda flags, slot, value, info: stream_wait_value32(stream, flags.data_ptr() + 4 * slot, value))


def _ag_steps(ws, sched, a, gathered, parity: int, epoch: int, *, push: bool, local_in_place: bool,
              pull_peers=None) -> list:
    """The AG producer (module docstring). ``pull_peers``: a callable that launches the SM-copy
    producer, which then replaces the copy engine's per-peer waits, pulls and signals."""
    W, r = ws.world_size, ws.rank
    m, K = a.shape
    mine = ws.flags(r)
    steps = []
    if not local_in_place:
        for s in range(sched.splits):
            lo, hi = sched.split_rows(s)
            steps += [(COPY, gathered[r * m + lo : r * m + hi], a[lo:hi]),
                      (SIGNAL, mine, sch.ag_data_slot(W, r, s), epoch)]
    if push:
        # Peer p reads our chunk after its own: p = r-1 reaches it first, then r-2, ...
        for p in sorted(sched.peers(), key=lambda p: (r - p) % W):
            dest = ws.data(p, parity, (W * m, K), a.dtype)
            for s in range(sched.splits):
                lo, hi = sched.split_rows(s)
                steps += [(COPY, dest[r * m + lo : r * m + hi], a[lo:hi]),
                          (SIGNAL, ws.flags(p), sch.ag_data_slot(W, r, s), epoch)]
        return steps
    steps.append((COPY, ws.data(r, parity, (m, K), a.dtype), a))
    steps += [(SIGNAL, ws.flags(p), sch.ag_ready_slot(r), epoch) for p in sched.peers()]
    if local_in_place:
        steps.append((COPY, gathered[r * m : (r + 1) * m], a))  # only for the caller: nothing waits on it
    if pull_peers is not None:
        return steps + [(KERNEL, pull_peers)]
    for p in sched.peers():
        steps.append((WAIT, mine, sch.ag_ready_slot(p), epoch, dict(what="staged rows", peer=p, chunk=p)))
        staged = ws.data(p, parity, (m, K), a.dtype)
        for s in range(sched.splits):
            lo, hi = sched.split_rows(s)
            steps += [(COPY, gathered[p * m + lo : p * m + hi], staged[lo:hi]),
                      (SIGNAL, mine, sch.ag_data_slot(W, p, s), epoch)]
    return steps


def _rs_done_slot(transport: str, world_size: int, src: int, split: int) -> int:
    """The destination's flag that the consumer itself sets when (dst, split) is complete (pull/remote)."""
    if transport == "pull":
        return sch.rs_staged_slot(world_size, src, split)
    return sch.rs_recv_slot(world_size, src, split)


def _rs_steps(ws, sched, transport: str, partial, recv, staged_offset: int, parity: int, epoch: int,
              tiles_per_block: int) -> list:
    W, r = ws.world_size, ws.rank
    _, mc, N = recv.shape
    steps = []
    if transport == "push":
        for d in sched.peers():
            dest = ws.data(d, parity, recv.shape, recv.dtype)[r]
            for s in range(sched.splits):
                lo, hi = sched.split_rows(s)
                target = len(sched.split_blocks(s)) * tiles_per_block
                steps += [
                    (WAIT, ws.counters, sch.rs_counter_slot(d, s), target,
                     dict(what="local partial tiles", peer=r, chunk=d, split=s)),
                    (COPY, dest[lo:hi], partial[d, lo:hi]),
                    (SIGNAL, ws.flags(d), sch.rs_recv_slot(W, r, s), epoch),
                ]
    elif transport == "pull":
        mine = ws.flags(r)
        # Peer p computes chunks p+1, p+2, ...: ours is ready first on p = r-1, then r-2, ...
        for p in sorted(sched.peers(), key=lambda p: (r - p - 1) % W):
            staged = ws.data(p, parity, recv.shape, recv.dtype, staged_offset)[r]
            for s in range(sched.splits):
                lo, hi = sched.split_rows(s)
                steps += [
                    (WAIT, mine, sch.rs_staged_slot(W, p, s), epoch,
                     dict(what="staged partials", peer=p, chunk=r, split=s)),
                    (COPY, recv[p, lo:hi], staged[lo:hi]),
                    (SIGNAL, mine, sch.rs_recv_slot(W, p, s), epoch),
                ]
    return steps


# ---- the two ops -------------------------------------------------------------------------------


class _Call:
    """One fused call: epoch, deadline, and the join/raise logic shared by both ops."""

    def __init__(self, ws: SymmetricWorkspace, op: str, timeout_s: float, gemm_shape: tuple[int, int, int],
                 a: torch.Tensor, weight: torch.Tensor) -> None:
        self.ws, self.op, self.timeout_s = ws, op, timeout_s
        ws.check()  # a poisoned workspace raises before any tuning work
        self.config = _kernel_config(ws, op, gemm_shape, a, weight)
        self.epoch = ws.next_epoch()
        self.parity = self.epoch % 2
        self.deadline = time.monotonic() + timeout_s
        self.consumer = "triton" if ws.is_cuda else cpu_consumer()
        self.block_m = self.config.block_m if self.consumer == "triton" else CPU_BLOCK_M
        self.producer_error: BaseException | None = None
        # Stream-ordered before the producer's first step (its stream waits on the caller's stream).
        ws.counters.zero_()

    def wait_info(self) -> dict:
        return dict(deadline=self.deadline, timeout_s=self.timeout_s, op=self.op, rank=self.ws.rank,
                    abort=self._raise_if_producer_failed)

    def _raise_if_producer_failed(self) -> None:
        if self.producer_error is not None:
            raise self.producer_error

    def _produce_on_thread(self, steps) -> None:
        try:
            with torch.no_grad():  # grad mode is per thread: the caller's no_grad does not reach here
                _run_steps_on_thread(steps, **self.wait_info())
        except BaseException as exc:
            self.producer_error = exc
            raise

    def run(self, steps: list, consume) -> None:
        """Run the producer ``steps`` (thread or stream) beside ``consume()``; join; raise on any timeout.

        On CUDA the producer's steps up to its first wait are queued before the kernel (its first
        copies start while the kernel is still being launched), the rest after it. A stream wait
        blocks everything queued behind it when streams share a hardware queue (always so with
        ``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron sets; by chance otherwise), so no wait may sit
        in front of the kernel: RS's producer waits on the kernel's own counters, and AG's waits on a
        peer that may never come, where only the kernel's bounded wait (which then releases the
        producer) ends the call.
        """
        ws = self.ws
        if ws.is_cuda:
            main = torch.cuda.current_stream(ws.device)
            ws.producer_stream.wait_stream(main)
            first_wait = next((i for i, step in enumerate(steps) if step[0] == WAIT), len(steps))
            _enqueue_steps_on_stream(steps[:first_wait], ws.producer_stream)
            consume()
            _enqueue_steps_on_stream(steps[first_wait:], ws.producer_stream)
            main.wait_stream(ws.producer_stream)
            ws.note_kernel_launch(self.timeout_s)
            if _blocking():
                ws.synchronize()
            return
        future = ws.submit(self._produce_on_thread, steps)
        try:
            consume()
            self.raise_kernel_error()
        except BaseException as exc:
            future.exception()  # the producer's waits are bounded by the same deadline
            ws.poison(exc)
            raise
        exc = future.exception()
        if exc is not None:
            ws.poison(exc)
            raise exc

    def launch(self, mode: int, sched, **tensors) -> None:
        ws = self.ws
        kern.launch(
            mode, blocks=ws.device_blocks(sched), chunk_rows=sched.chunk_rows, rank=ws.rank,
            world_size=ws.world_size, flags=ws.flags(ws.rank), error=ws.error, epoch=self.epoch,
            timeout_s=self.timeout_s, config=self.config, max_splits=sch.MAX_SPLITS,
            counters=ws.counters, splits=sched.splits, **tensors,
        )

    def raise_kernel_error(self) -> None:
        """CPU (interpreted kernel): turn the kernel's error record into the exception at once."""
        self.ws.read_kernel_error(self.timeout_s)
        self.ws.check()


def _blocking() -> bool:
    return os.environ.get("FLUXLITE_BLOCKING", "0") not in ("", "0")


def ag_gemm(ws: SymmetricWorkspace, a, weight, bias, *, timeout_s: float, out=None, keep_gathered: bool = True):
    """Fused AG-GEMM. ``a: [m, K]``, ``weight: [N_local, K]`` -> ``([W*m, N_local], gathered [W*m, K])``.

    ``keep_gathered=False``: the caller does not keep the gathered input, so the rows may be pushed
    into the workspace (one copy fewer); the second item is then ``None``.
    """
    W, r = ws.world_size, ws.rank
    m, K = a.shape
    # Checked before the call takes an epoch: a rank that raises later would be an epoch behind.
    producer = TUNING.ag_producer
    if producer not in ("copy_engine", "sm"):
        raise ValueError(f"Tuning.ag_producer must be 'copy_engine' or 'sm', got {producer!r}")
    if producer == "sm" and not ws.is_cuda and cpu_consumer() == "triton":
        raise ValueError("Tuning.ag_producer='sm' on CPU needs FLUXLITE_CPU_CONSUMER=torch: the Triton "
                         "interpreter is not thread-safe, and producer and consumer would both run it")
    call = _Call(ws, "ag_gemm", timeout_s, (W * m, K, weight.shape[0]), a, weight)
    sched = sch.ag_schedule(W, r, m, call.block_m, _splits(call.block_m, m))
    push = not keep_gathered and TUNING.ag_push and producer == "copy_engine"
    in_place = TUNING.ag_local_in_place
    ws.reserve(W * a.numel() * a.element_size() if push else a.numel() * a.element_size())
    gathered = ws.data(r, call.parity, (W * m, K), a.dtype) if push else a.new_empty((W * m, K))
    if out is None:
        out = a.new_empty((W * m, weight.shape[0]))
    mine = ws.flags(r)

    def consume_torch() -> None:
        for chunk, row0, rows, split in sched.rows():
            rows_ = slice(chunk * m + row0, chunk * m + row0 + rows)
            if in_place and chunk == r:
                linear_into(out[rows_], a[row0 : row0 + rows], weight, bias)
                continue
            host_wait_flag(mine, sch.ag_data_slot(W, chunk, split), call.epoch, what="gathered rows",
                           peer=chunk, chunk=chunk, split=split, **call.wait_info())
            linear_into(out[rows_], gathered[rows_], weight, bias)

    def consume_triton() -> None:
        call.launch(kern.MODE_AG, sched=sched, a=gathered, a_local=a if in_place else None, weight=weight, out=out,
                    bias=bias)

    def pull_peers(world_size: int = W) -> None:
        pull_kern.launch(peer_ptrs=ws.data_ptrs(call.parity), gathered=gathered, flags=mine, counters=ws.counters,
                         error=ws.error, split_rows=ws.device_split_rows(sched), m=m, rank=r, world_size=world_size,
                         epoch=call.epoch, timeout_s=timeout_s, max_splits=sch.MAX_SPLITS,
                         config=pull_kern.INTERPRET_PULL_CONFIG if not ws.is_cuda else TUNING.pull,
                         interpret=not ws.is_cuda)

    if producer == "sm":
        _warm_up_once(ws, ("pull", a.dtype, TUNING.pull), lambda: pull_peers(world_size=1))
    steps = _ag_steps(ws, sched, a, gathered, call.parity, call.epoch, push=push, local_in_place=in_place,
                      pull_peers=pull_peers if producer == "sm" else None)
    call.run(steps, consume_triton if call.consumer == "triton" else consume_torch)
    return out, (None if push else gathered)


_WARM: set[tuple] = set()


def _warm_up_once(ws: SymmetricWorkspace, key: tuple, launch) -> None:
    """CUDA: run a producer kernel once (with nothing to wait for) while no fused kernel spins, so
    its module is loaded then and never later, when loading beside a spinning consumer could
    deadlock (ANCHORS.md: lazy module loading)."""
    if not ws.is_cuda or (ws.device, *key) in _WARM:
        return
    torch.cuda.synchronize(ws.device)
    with torch.cuda.stream(ws.producer_stream):
        launch()
    torch.cuda.synchronize(ws.device)
    _WARM.add((ws.device, *key))


def gemm_rs(ws: SymmetricWorkspace, a, weight, bias, *, timeout_s: float, out=None):
    """Fused GEMM-RS. ``a: [M, K_local]``, ``weight: [N, K_local]`` -> ``[M/W, N]``."""
    W, r = ws.world_size, ws.rank
    M = a.shape[0]
    N = weight.shape[0]
    transport = TUNING.rs_transport  # checked before the call takes an epoch (see ag_gemm)
    if transport not in kern.RS_TRANSPORTS:
        raise ValueError(f"Tuning.rs_transport must be one of {sorted(kern.RS_TRANSPORTS)}, got {transport!r}")
    call = _Call(ws, "gemm_rs", timeout_s, (M, a.shape[1], N), a, weight)
    mc = M // W
    sched = sch.rs_schedule(W, r, mc, call.block_m, _splits(call.block_m, mc))
    recv_bytes = _round_up(W * mc * N * a.element_size(), 256)
    ws.reserve(recv_bytes * (2 if transport == "pull" else 1))
    recv = ws.data(r, call.parity, (W, mc, N), a.dtype)  # slot p: rank p's partial of our rows
    if transport == "pull":  # our partials of the peers' rows, where the peers pull them from
        partial = ws.data(r, call.parity, (W, mc, N), a.dtype, recv_bytes)
    elif transport == "push":  # our partials of the peers' rows, before they leave
        partial = a.new_empty((W, mc, N))
    else:  # remote: written straight into the peers' recv
        partial = None
    if out is None:
        out = a.new_empty((mc, N))
    mine = ws.flags(r)
    triton_consumer = call.consumer == "triton"
    tiles_per_block = -(-N // call.config.block_n) if triton_consumer else 1
    acc_dtype = torch.promote_types(a.dtype, torch.float32)  # sum the partials in fp32 (fp64 stays fp64)

    def consume_torch() -> None:
        done = [0] * ws.counters.numel()
        for chunk, row0, rows, split in sched.rows():
            src = a[chunk * mc + row0 : chunk * mc + row0 + rows]
            if chunk != r:
                dst = ws.data(chunk, call.parity, recv.shape, a.dtype)[r] if partial is None else partial[chunk]
                torch.matmul(src, weight.t(), out=dst[row0 : row0 + rows])
                slot = sch.rs_counter_slot(chunk, split)
                done[slot] += 1
                host_set_flag(ws.counters, slot, done[slot])
                if transport != "push" and done[slot] == len(sched.split_blocks(split)):
                    host_set_flag(ws.flags(chunk), _rs_done_slot(transport, W, r, split), call.epoch)
                continue
            acc = (src @ weight.t()).to(acc_dtype)
            for p in sched.peers():
                host_wait_flag(mine, sch.rs_recv_slot(W, p, split), call.epoch, what="partials",
                               peer=p, chunk=r, split=split, **call.wait_info())
                acc += recv[p, row0 : row0 + rows]
            if bias is not None:
                acc += bias
            out[row0 : row0 + rows] = acc

    def consume_triton() -> None:
        call.launch(kern.MODE_RS, sched=sched, a=a, weight=weight, out=out, bias=bias,
                    partial=partial if partial is not None else recv, recv=recv,
                    dynamic=TUNING.rs_dynamic, early_reduce=TUNING.rs_early_reduce, rs_transport=transport,
                    defer_publish=TUNING.rs_defer_publish,
                    peer_flags=ws.flag_ptrs(), peer_ptrs=ws.data_ptrs(call.parity))

    call.run(_rs_steps(ws, sched, transport, partial, recv, recv_bytes, call.parity, call.epoch, tiles_per_block),
             consume_triton if triton_consumer else consume_torch)
    return out


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to
