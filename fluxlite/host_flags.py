"""The bounded host-side flag wait used by the CPU protocol, and fluxlite's timeout.

A flag is set by storing :data:`fluxlite.schedule.SET` and cleared by its owner at the start of its
next call (:mod:`fluxlite.schedule`); a waiter waits for ``flag >= value``. Every wait is bounded by a
timeout (argument, else the ``FLUXLITE_TIMEOUT_S`` environment variable, else
:data:`DEFAULT_TIMEOUT_S`).

Host flags are read and written as aligned 4-byte words at their address. On x86 a store of the
data followed by a store of the flag is seen in that order by every other process (TSO), which the
CPU protocol relies on; other CPUs would need a fence.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch

from . import schedule as sch
from .process import PROCESS
from .errors import FluxliteCallMismatchError, FluxliteError, FluxliteTimeoutError

DEFAULT_TIMEOUT_S = 120.0

REDUCED_ROWS = "reduced rows"
"""What a wait for a peer's ``reduced`` flag (:func:`fluxlite.schedule.reduced_slot`) waits for, as its
timeout names it (with the split): the CPU end's host wait and the GPU's record
(:data:`~fluxlite.kernels.device_flags.ERR_TIMEOUT_FINISHED`) alike."""


MAX_TIMEOUT_S = 9.2e9
"""The longest timeout in seconds: the kernels' bounded waits count it in int64 nanoseconds."""


def timeout_problem(value) -> str | None:
    """What ``value`` must be as a timeout in seconds, if it is not that; else None. Infinity is not
    a timeout: every wait is bounded."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        return "a positive number of seconds"
    if not value <= MAX_TIMEOUT_S:
        return f"a finite number of seconds, at most {MAX_TIMEOUT_S:g} (every wait is bounded)"
    return None


def set_default_timeout(seconds: float | None) -> None:
    """Set the process-wide default flag timeout (``None`` goes back to env/default)."""
    problem = None if seconds is None else timeout_problem(seconds)
    if problem:
        raise ValueError(f"timeout must be None or {problem}, got {seconds!r}")
    PROCESS.timeout_override = seconds


def resolve_timeout(timeout: float | None) -> float:
    """The timeout in seconds: the argument, else the override, else ``FLUXLITE_TIMEOUT_S``, else default."""
    if timeout is None:
        timeout = PROCESS.timeout_override
    if timeout is None:
        env = os.environ.get("FLUXLITE_TIMEOUT_S")
        if not env:
            return DEFAULT_TIMEOUT_S
        try:
            value = float(env)
        except ValueError:
            value = None
        problem = timeout_problem(value)
        if problem:
            raise ValueError(f"FLUXLITE_TIMEOUT_S must be {problem}, got {env!r}")
        return value
    problem = timeout_problem(timeout)
    if problem:
        raise ValueError(f"timeout must be {problem}, got {timeout!r}")
    return float(timeout)


def flag_address(flags: torch.Tensor, slot: int) -> int:
    """The address of int32 ``flags[slot]``."""
    return flags.data_ptr() + 4 * slot


def host_store(address: int, value: int) -> None:
    """Store the int32 ``value`` at a host ``address`` (possibly in a peer's mapping)."""
    ctypes.c_int32.from_address(address).value = value


def host_set_flag(flags: torch.Tensor, slot: int, value: int) -> None:
    """Store ``value`` into int32 ``flags[slot]`` (a host tensor, possibly a peer's mapping)."""
    host_store(flag_address(flags, slot), value)


def host_wait(address: int, value: int, *, deadline: float, timeout_s: float, op: str, what: str, rank: int,
              peer: int, chunk: int, split: int = 0, epoch: int = 0, abort=None) -> None:
    """Spin until the int32 at host ``address`` is ``>= value``; raise :class:`FluxliteTimeoutError`
    (naming call ``epoch``) past ``deadline``.

    ``abort`` (optional) is called on every spin and may raise to end the wait early: the consumer
    uses it to fail at once when the producer that would set the flag has failed.
    Yields the CPU between reads: with more ranks than cores, pure spinning starves the peer that
    would set the flag.
    """
    word = ctypes.c_int32.from_address(address)
    while True:
        seen = word.value
        if seen >= value:
            return
        if abort is not None:
            abort()
        if time.monotonic() > deadline:
            raise FluxliteTimeoutError(
                op=op, what=what, rank=rank, peer=peer, chunk=chunk, split=split,
                epoch=epoch, seen=seen, timeout_s=timeout_s,
            )
        os.sched_yield()


def host_wait_flag(flags: torch.Tensor, slot: int, value: int, **kwargs) -> None:
    """:func:`host_wait` on int32 ``flags[slot]``."""
    host_wait(flag_address(flags, slot), value, **kwargs)


def exception_from_record(rec: list[int], *, rank: int, world_size: int, timeout_s: float) -> FluxliteError | None:
    """The exception for a kernel's error record (:mod:`fluxlite.kernels.device_flags`), or ``None`` if clear."""
    from .kernels.device_flags import (ERR_MISMATCH, ERR_TIMEOUT_AG, ERR_TIMEOUT_ALIGN, ERR_TIMEOUT_FINISHED,
                                       ERR_TIMEOUT_RS)

    code, slot, epoch, seen, peer, chunk = rec[:6]
    if code == 0:
        return None
    if code == ERR_MISMATCH:
        w = sch.SIG_WORDS
        return FluxliteCallMismatchError(rank=rank, peer=peer, mine=sch.describe_signature(rec[8 + w : 8 + 2 * w]),
                                         theirs=sch.describe_signature(rec[8 : 8 + w]))
    what = {ERR_TIMEOUT_AG: "gathered rows", ERR_TIMEOUT_RS: "partials", ERR_TIMEOUT_FINISHED: REDUCED_ROWS}.get(
        code, f"a flag (code {code})")
    if code == ERR_TIMEOUT_ALIGN:
        what = "its arrival at a parity-alignment call (a null call between graph replays)"
    elif slot < world_size:
        what = "its arrival at this call (ready flag)"
    return FluxliteTimeoutError(op="fused kernel", what=what, rank=rank, peer=peer, chunk=chunk,
                                split=sch.split_of_data_slot(world_size, slot), epoch=epoch, seen=seen,
                                timeout_s=timeout_s)
