"""The overlap limit: what the hardware allows an overlapped AG-GEMM or GEMM-RS to cost.

The floor of an overlapped op is not ``max(T_gemm, T_comm)``. The copy engine that moves the op's
bytes over the links also reads and writes the same HBM (and L2) as the GEMM, so a GEMM with the
transfer running beside it is slower than the GEMM alone. The limit is therefore measured, not
computed: the makespan of the GEMM (``torch.matmul``, cuBLAS on CUDA, on operands whose rows are
whole 16-byte units: :func:`fluxlite._sequential.whole_row_operands`) on the caller's stream while
a copy engine moves the op's bytes on a second stream, both started together::

    T_limit = makespan(gemm on stream 1  ||  copies on stream 2)

The bytes moved on each rank (``W`` ranks, ``e`` bytes per element):

- AG-GEMM ``[m, K]`` rows per rank: every peer's rows, ``(W-1)·m·K·e``, pulled from the peers'
  symmetric buffers (what the fused op's producer moves).
- GEMM-RS ``[M, K_local]`` -> ``[M/W, N]``: the partials, ``(W-1)·(M/W)·N·e``, pulled from the peers,
  and the reduction's reads of the same bytes. A local copy moves as many HBM bytes as those reads
  when it copies half as many (each byte is read once and written once), so that is what runs.
- GEMM-AllReduce ``[M, K_local]`` -> ``[M, N]``, two shots: as GEMM-RS on chunks of ``ceil(M/W)``
  rows, and the reduced chunks back from each peer: twice the bytes from each peer. One shot (a call
  small enough, :meth:`fluxlite.ops.gemm_ar.GemmAllReduce.one_shot`): every peer's whole partial,
  ``M·N·e`` from each, and this rank's own partial read and the output written, which a local copy of
  ``M·N·e`` bytes matches.

Since every rank does the same, each GPU's HBM and links carry what they carry in the fused op.
Nothing is computed on the copied bytes: the limit has no reduction arithmetic and no flags.

An implementation's efficiency against the limit (:func:`efficiency`)::

    efficiency = (T_sequential - T_impl) / (T_sequential - T_limit)

1.0 means all the communication that can be hidden is hidden; 0 means none (sequential); below 0
is slower than sequential. Where ``T_sequential - T_limit`` is within the measurement's noise of 0
(nothing to hide), the figure is undefined and reported as NaN.

On CPU ranks the copies are ``memmove`` calls on a thread between the ranks' shared-memory files:
the figure then says how a CPU's memory system shares one stream of copies with a matmul, which is
only useful to test the profiler.
"""

from __future__ import annotations

import ctypes
import itertools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from ..group import TPGroup

_KEYS = itertools.count()  # one workspace name per transfer


def transfer_bytes(op: str, world_size: int, M: int, K: int, N: int, element_size: int) -> tuple[int, int]:
    """``(bytes pulled from each peer, bytes copied locally)`` per rank for one op (module docstring).
    ``M``: AG's gathered rows or RS's rows; ``K``, ``N``: the per-rank GEMM's."""
    W = world_size
    if W == 1:
        return 0, 0
    if op == "ag_gemm":
        return (M // W) * K * element_size, 0
    chunk = -(-M // W) * N * element_size
    if op == "gemm_ar":
        from ..ops.gemm_ar import AR

        if AR.one_shot(W, M, N, element_size):  # every peer's whole partial
            return M * N * element_size, M * N * element_size
        return 2 * chunk, (W - 1) * chunk // 2  # two shots: the partials out, the reduced chunks back
    return chunk, (W - 1) * chunk // 2


class Transfer:
    """The copies of one op's bytes on this rank: from each peer's symmetric buffer into a local
    scratch buffer, then the local copy (:func:`transfer_bytes`). :meth:`start` enqueues them beside
    the caller's stream (CUDA) or starts them on a thread (CPU); :meth:`join` waits for them there.

    Building one is collective (it maps a symmetric buffer on every rank of ``tp``)."""

    def __init__(self, tp: TPGroup, device: torch.device, per_peer: int, local: int, timeout_s: float) -> None:
        from ..workspace import SymmetricWorkspace

        self.tp, self.device = tp, torch.device(device)
        self.per_peer, self.local = per_peer, local
        self.ws = SymmetricWorkspace(tp, self.device, f"limit/{tp.name}/{next(_KEYS)}", timeout_s)
        self.ws.reserve(max(per_peer, local, 1), timeout_s=timeout_s)
        W, r = tp.world_size, tp.rank
        self.scratch = torch.empty(max((W - 1) * per_peer, 1) + local, dtype=torch.uint8, device=self.device)
        dst = self.scratch.data_ptr()
        # Peers in the order the fused ops talk to them (r+1 first), each into its own slice.
        self.copies = [(dst + i * per_peer, self.ws.data_addr((r + 1 + i) % W, 0), per_peer)
                       for i in range(W - 1) if per_peer]
        if local:
            self.copies.append((dst + (W - 1) * per_peer, self.ws.data_addr(r, 1), local))
        if self.ws.is_cuda:
            from .. import _cuda_driver as cu

            cu.ensure_context(self.device.index)
            self._cu = cu
            self.stream = torch.cuda.Stream(device=self.device, priority=-1)  # as the fused ops' producer
            self._handle = self.stream.cuda_stream
        else:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fluxlite-limit")
            self._future = None

    def start(self, after: torch.cuda.Event | None = None) -> None:
        """Start the copies: enqueued on a side stream after the caller's work so far (CUDA; after
        ``after`` instead where given, an event recorded on the caller's stream), or on the thread."""
        if self.ws.is_cuda:
            if after is None:
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
            else:
                self.stream.wait_event(after)
            for dst, src, n in self.copies:
                self._cu.memcpy_async(self._handle, dst, src, n)
        else:
            self._future = self._pool.submit(self._copy_on_thread)

    def join(self) -> None:
        """Make the caller's stream wait for the copies (CUDA), or wait for the thread (CPU)."""
        if self.ws.is_cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
        else:
            future, self._future = self._future, None
            future.result()

    def beside(self, fn: Callable) -> Callable:
        """``fn`` with the copies beside it, both started after the caller's work so far; its result
        once both are done.

        On CUDA ``fn``'s work is enqueued first and the copies behind it, on their own stream. With
        one hardware queue per GPU (``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron's training sets)
        the GPU takes work in the order it was enqueued: with the copies first, GEMM-RS's limit
        (whose copies include one within the GPU) read 1.09-1.28x cuBLAS on two H200s, the copies'
        time added to the GEMM's; with the GEMM first it reads 1.01-1.02x, as with several queues.
        AG-GEMM's limit (peers' copies only) read 1.00x either way."""
        def run(x):
            if not self.ws.is_cuda:
                self.start()
                out = fn(x)
            else:
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(self.device))
                out = fn(x)
                self.start(after=ready)
            self.join()
            return out
        return run

    def _copy_on_thread(self) -> None:
        for dst, src, n in self.copies:
            ctypes.memmove(dst, src, n)  # releases the GIL: the matmul runs beside it

    def close(self) -> None:
        """Wait for copies still running (a run stopped between start and join leaves some), then
        let go of the buffers."""
        if self.ws.is_cuda:
            self.stream.synchronize()  # they write into the scratch buffer, which goes with us
        else:
            self._pool.shutdown(wait=True)
        self.ws.close()


def limit_case(tp: TPGroup, op: str, M: int, K: int, N: int, dtype: torch.dtype, device: torch.device,
               gemm: Callable, timeout_s: float) -> tuple[Callable, Callable, Transfer]:
    """``(limit, copy, transfer)``: ``limit(x)`` runs ``gemm(x)`` (the op's per-rank GEMM alone)
    with the op's transfer beside it and returns the GEMM's result once both are done; ``copy(x)``
    runs the transfer alone. Call ``transfer.close()`` when done. Collective to build."""
    per_peer, local = transfer_bytes(op, tp.world_size, M, K, N, torch.empty((), dtype=dtype).element_size())
    transfer = Transfer(tp, device, per_peer, local, timeout_s)

    def copy(x):
        transfer.start()
        transfer.join()

    return transfer.beside(gemm), copy, transfer


def efficiency(t_sequential: float, t_impl: float, t_limit: float, noise: float = 0.01) -> float:
    """``(T_seq - T_impl) / (T_seq - T_limit)`` (module docstring); NaN where sequential is within
    ``noise`` (relative) of the limit, which leaves nothing measurable to hide."""
    hideable = t_sequential - t_limit
    if not all(map(math.isfinite, (t_sequential, t_impl, t_limit))) or hideable <= noise * t_sequential:
        return math.nan
    return (t_sequential - t_impl) / hideable
