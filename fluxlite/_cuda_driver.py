"""The few CUDA driver calls the producer makes, called directly (ctypes on ``libcuda``) on raw
addresses and stream handles, so that a fused call's dozen copies and flag operations cost a
microsecond or two each rather than a torch dispatch each.

- ``cuStreamBatchMemOp``: stream memory operations (32-bit flag writes and waits), a run of them
  in one call, which a CUDA graph holds as one node (each node costs about 1 µs of a graph's launch).
  They run on the
  stream's front end, not on an SM, so a producer stream built only of copies and these operations
  never needs an SM that a spinning persistent GEMM holds, and never loads a module (so lazy module loading cannot deadlock it beside a spinning kernel;
  docs/safety.md). A write with default
  flags fences system-wide before it stores, so a flag written after a copy on the same stream is
  seen only after the copied data.
- ``cuMemcpyAsync``: a copy between any two addresses this context can reach (unified addressing;
  peers' symmetric memory is mapped here), on the copy engine.
- ``cuEventRecord``, ``cuStreamWaitEvent``: ordering the producer stream after the caller's.
- ``cuGraphLaunch``: an eager call replayed from its own graph (:meth:`fluxlite.fused.call.Call.run`).
- ``cuMemHostGetDevicePointer``: where a kernel writes the host copy of its error record.
"""

from __future__ import annotations

import ctypes
import threading
from functools import lru_cache

from .process import PROCESS

_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: (int32)(*addr - value) >= 0
_WRITE_DEFAULT = 0x0  # with a system-wide memory barrier before the write

_P, _U64, _UINT, _SZ = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t
_SIGNATURES = {
    # name: (argtypes, entry points to try; CUDA >= 11.7 exports the stream memops as *_v2)
    "cuStreamBatchMemOp": ([_P, _UINT, _P, _UINT], ("cuStreamBatchMemOp_v2", "cuStreamBatchMemOp")),
    "cuMemcpyAsync": ([_U64, _U64, _SZ, _P], ("cuMemcpyAsync",)),
    "cuEventRecord": ([_P, _P], ("cuEventRecord",)),
    "cuStreamWaitEvent": ([_P, _P, _UINT], ("cuStreamWaitEvent",)),
    "cuGraphLaunch": ([_P, _P], ("cuGraphLaunch",)),
    "cuPointerGetAttribute": ([_P, ctypes.c_int, _U64], ("cuPointerGetAttribute",)),
    "cuCtxGetCurrent": ([ctypes.POINTER(_P)], ("cuCtxGetCurrent",)),
    "cuCtxSetCurrent": ([_P], ("cuCtxSetCurrent",)),
    "cuDeviceGet": ([ctypes.POINTER(ctypes.c_int), ctypes.c_int], ("cuDeviceGet",)),
    "cuDevicePrimaryCtxRetain": ([ctypes.POINTER(_P), ctypes.c_int], ("cuDevicePrimaryCtxRetain",)),
    "cuMemHostGetDevicePointer": ([ctypes.POINTER(_U64), _P, _UINT], ("cuMemHostGetDevicePointer_v2",
                                                                      "cuMemHostGetDevicePointer")),
}


@lru_cache(maxsize=1)
def _driver() -> dict:
    lib = ctypes.CDLL("libcuda.so.1")
    fns = {}
    for name, (argtypes, symbols) in _SIGNATURES.items():
        fn = next(getattr(lib, s) for s in symbols if hasattr(lib, s))
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        fns[name] = fn
    return fns


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"fluxlite: {what} failed with CUresult {rc}")


_bound = threading.local()


def ensure_context(device_index: int) -> None:
    """Make CUDA's primary context of ``device_index`` current on this thread, as the runtime does
    lazily on a thread's first runtime call. A driver call on a thread that never made one (e.g.
    autograd's backward thread, before its first kernel) fails with CUDA_ERROR_INVALID_CONTEXT."""
    if getattr(_bound, "device", None) == device_index:
        return
    ctx = _P()
    _check(_driver()["cuCtxGetCurrent"](ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        # Not torch.cuda.set_device: torch skips cudaSetDevice when the thread's device already
        # reads as the target (a new thread reads 0), and then no context becomes current.
        _check(_driver()["cuCtxSetCurrent"](_primary_context(device_index)), "cuCtxSetCurrent")
    _bound.device = device_index


def _primary_context(device_index: int) -> int:
    """The device's primary context (the runtime's), retained once per process
    (:attr:`fluxlite.process.Process.primary_contexts`)."""
    contexts = PROCESS.primary_contexts
    if device_index not in contexts:
        dev, ctx = ctypes.c_int(), _P()
        _check(_driver()["cuDeviceGet"](ctypes.byref(dev), device_index), "cuDeviceGet")
        _check(_driver()["cuDevicePrimaryCtxRetain"](ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        contexts[device_index] = ctx.value
    return contexts[device_index]


class MemOp(ctypes.Structure):
    """One ``CUstreamBatchMemOpParams`` (a 48-byte union) as its ``waitValue`` / ``writeValue`` member."""

    _fields_ = [("operation", ctypes.c_uint), ("address", _U64), ("value", _U64), ("flags", ctypes.c_uint),
                ("alias", _U64), ("pad", _U64)]


_OP_WAIT_VALUE_32, _OP_WRITE_VALUE_32 = 1, 2
MAX_BATCH = 255  # operations per cuStreamBatchMemOp call (the driver takes fewer than 256)


def mem_op_batch(ops: list[tuple[bool, int, int]]) -> ctypes.Array:
    """The parameters of one :func:`stream_batch_mem_op`: ``ops`` as ``(is_wait, address, value)``,
    in order. A wait blocks the stream's later work until the int32 at ``address`` is >= ``value``;
    a write fences system-wide, then stores ``value``. Built once and kept with its program."""
    if not 0 < len(ops) <= MAX_BATCH:
        raise ValueError(f"a memop batch holds 1 to {MAX_BATCH} operations, got {len(ops)}")
    batch = (MemOp * len(ops))()
    for op, (is_wait, address, value) in zip(batch, ops):
        op.operation = _OP_WAIT_VALUE_32 if is_wait else _OP_WRITE_VALUE_32
        op.address, op.value = address, value & 0xFFFFFFFF
        op.flags = _WAIT_GEQ if is_wait else _WRITE_DEFAULT
    return batch


def stream_batch_mem_op(stream: int, batch: ctypes.Array) -> None:
    """Enqueue on ``stream`` the flag operations of ``batch`` (:func:`mem_op_batch`), in its order.

    A wait has no timeout. fluxlite only waits this way on values that a bounded kernel always
    produces (its own GEMM's counters), or that the consumer kernel releases when its own bounded
    wait ends, so a missing peer cannot leave the stream blocked.
    """
    _check(_driver()["cuStreamBatchMemOp"](stream, len(batch), ctypes.addressof(batch), 0), "cuStreamBatchMemOp")


def memcpy_async(stream: int, dst: int, src: int, nbytes: int) -> None:
    """Enqueue on ``stream``: copy ``nbytes`` from address ``src`` to address ``dst``."""
    _check(_driver()["cuMemcpyAsync"](dst, src, nbytes, stream), "cuMemcpyAsync")


def event_record(event: int, stream: int) -> None:
    _check(_driver()["cuEventRecord"](event, stream), "cuEventRecord")


def stream_wait_event(stream: int, event: int) -> None:
    """Enqueue on ``stream``: later work waits until ``event`` (recorded on another stream) completes."""
    _check(_driver()["cuStreamWaitEvent"](stream, event, 0), "cuStreamWaitEvent")


def host_device_pointer(host_address: int) -> int:
    """The device address of pinned host memory at ``host_address`` (a kernel may store there)."""
    dptr = _U64()
    _check(_driver()["cuMemHostGetDevicePointer"](ctypes.byref(dptr), host_address, 0), "cuMemHostGetDevicePointer")
    return dptr.value


_POINTER_ATTRIBUTE_BUFFER_ID = 7


def buffer_ids(addresses) -> tuple[int, ...]:
    """The driver's id of the allocation holding each device address (0 for a null address).

    Unlike an address, an id is never reused in the process: memory freed to the driver and
    allocated again at the same address (torch.cuda.empty_cache, then a new segment) has a new id."""
    if not addresses:  # a call whose copies touch none of its own tensors (a one shot, AG-GEMM's SM push)
        return ()
    get, buffer = _driver()["cuPointerGetAttribute"], _U64(0)
    out, ids = ctypes.byref(buffer), []
    for address in addresses:  # on every replayed call: one driver call per address, nothing else
        buffer.value = 0
        if address:
            _check(get(out, _POINTER_ATTRIBUTE_BUFFER_ID, address), "cuPointerGetAttribute(BUFFER_ID)")
        ids.append(buffer.value)
    return tuple(ids)


def graph_launch(graph_exec: int, stream: int) -> None:
    """Enqueue the instantiated graph ``graph_exec`` (a raw ``CUgraphExec``) on ``stream``.

    ``torch.cuda.CUDAGraph.replay()`` also refills the default generator's seed and offset tensors
    (two fill kernels) before it launches: for graphs without random numbers, only the launch."""
    _check(_driver()["cuGraphLaunch"](graph_exec, stream), "cuGraphLaunch")
