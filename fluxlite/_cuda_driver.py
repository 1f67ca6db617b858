"""Stream memory operations from the CUDA driver (``cuStreamWriteValue32``/``cuStreamWaitValue32``).

They run on the stream's front end, not on an SM: a producer stream built only of copies and these
operations never needs an SM that a spinning persistent GEMM holds, and never loads a module (the
first-call deadlock that lazy module loading causes in ANCHORS.md cannot happen on it).

A write with default flags fences system-wide before it stores, so a flag written after a copy on
the same stream is seen only after the copied data.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import torch

_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: (int32)(*addr - value) >= 0
_WRITE_DEFAULT = 0x0  # with a system-wide memory barrier before the write


@lru_cache(maxsize=1)
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    fns = {}
    for name in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
        # CUDA >= 11.7 exports the stream memop entry points as *_v2.
        fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        fns[name] = fn
    return fns


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"fluxlite: {what} failed with CUresult {rc}")


def stream_write_value32(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Enqueue on ``stream``: fence, then store the 32-bit ``value`` at device ``address``."""
    _check(_driver()["cuStreamWriteValue32"](stream.cuda_stream, address, value & 0xFFFFFFFF, _WRITE_DEFAULT),
           "cuStreamWriteValue32")


def stream_wait_value32(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Enqueue on ``stream``: block later work until the int32 at ``address`` is >= ``value``.

    The wait itself has no timeout. fluxlite only waits this way on values that a bounded kernel
    always produces (its own GEMM's counters), or that the consumer kernel releases when its own
    bounded wait times out, so a missing peer cannot leave the stream blocked.
    """
    _check(_driver()["cuStreamWaitValue32"](stream.cuda_stream, address, value & 0xFFFFFFFF, _WAIT_GEQ),
           "cuStreamWaitValue32")
