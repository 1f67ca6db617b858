"""The producer: a program of copies and flag operations that moves one fused call's data, run
beside the consumer GEMM. One program, two devices:

- CPU: a worker thread. ``signal`` stores to a mapped int32; ``wait`` spins with the call's deadline.
- CUDA: a high-priority side stream. ``copy`` is a copy-engine copy (peers' memory is mapped),
  ``signal`` is ``cuStreamWriteValue32`` (which fences first), ``wait`` is ``cuStreamWaitValue32``.
  No SM is needed, so a persistent GEMM that holds every SM can never starve its own producer.

A program is a list of steps: ``(COPY, dst, src)``, ``(SIGNAL, flags, slot, value)`` and
``(WAIT, flags, slot, value, info)``, where ``info`` names what the wait is for (error messages).
"""

from __future__ import annotations

import torch

from ..flags import host_set_flag, host_wait_flag

COPY, SIGNAL, WAIT = "copy", "signal", "wait"


def first_wait(steps: list) -> int:
    """Index of the first WAIT step (``len(steps)`` if none)."""
    return next((i for i, step in enumerate(steps) if step[0] == WAIT), len(steps))


def _run(steps, signal, wait) -> None:
    for step in steps:
        if step[0] == COPY:
            step[1].copy_(step[2])
        elif step[0] == SIGNAL:
            signal(*step[1:])
        else:
            wait(*step[1:])


def run_on_thread(steps: list, **wait_info) -> None:
    """Run ``steps`` here (the CPU producer thread); every wait bounded by ``wait_info['deadline']``."""
    with torch.no_grad():  # grad mode is per thread: the caller's no_grad does not reach here
        _run(steps, host_set_flag,
             lambda flags, slot, value, info: host_wait_flag(flags, slot, value, **wait_info, **info))


def enqueue_on_stream(steps: list, stream: torch.cuda.Stream) -> None:
    """Enqueue ``steps`` on ``stream`` (CUDA); returns at once."""
    from .._cuda_driver import stream_wait_value32, stream_write_value32

    with torch.cuda.stream(stream):
        _run(steps,
             lambda flags, slot, value: stream_write_value32(stream, flags.data_ptr() + 4 * slot, value),
             lambda flags, slot, value, info: stream_wait_value32(stream, flags.data_ptr() + 4 * slot, value))
