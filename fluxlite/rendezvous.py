"""Bounded collectives over the process group's key-value store.

``dist.barrier`` and ``dist.broadcast_object_list`` block until the process group's own timeout
(tens of minutes) when a peer never arrives, and then do not say which peer it was. These
collectives go through the c10d store that ``init_process_group`` made (a TCPStore or FileStore)
instead, so they work the same for gloo and NCCL groups, need no device, give up after fluxlite's
timeout, and raise :class:`~fluxlite.errors.FluxliteTimeoutError` naming the peer that never came.

Each rank publishes ``f"{key}/{rank}"``; keys are never deleted (that would need one more round to
know every reader is done), so callers pass a key unique per use, e.g. with a generation number,
and a stale key can never satisfy a later collective. They are meant for rare set-up steps such as
building or growing a workspace, not for every call.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable

import torch.distributed as dist

from .errors import FluxliteTimeoutError
from .group import TPGroup

# Waits poll ``store.check`` rather than calling ``store.wait``: on a TCPStore a pending wait holds
# the client's lock, stalling every other thread of this process that uses the store (measured: a
# check waited out a 2 s wait), and each timeout logs C++ warnings; FileStore.wait counts elapsed
# time in whole seconds, so it overshoots a 1 s timeout by a second. A check is one ~15 us round
# trip; backing off to 5 ms keeps a long wait near 1% of a core (ranks share cores) and adds at
# most 5 ms after the last peer arrives.
_FIRST_POLL_S = 1e-4
_MAX_POLL_S = 5e-3


def group_store(tp: TPGroup) -> dist.Store:
    """The default store, under a prefix naming ``tp``'s group so that two groups never share keys.

    Not cached: building a PrefixStore is cheap, and a cache keyed by group name would hand out a
    dead store after the process group is destroyed and re-created (names repeat across inits).
    """
    # PrefixStore puts a "/" between the prefix and every key.
    return dist.PrefixStore(f"fluxlite/{tp.group.group_name}", dist.distributed_c10d._get_default_store())


def _missing(store: dist.Store, keys: dict[int, str], deadline: float, abort=None) -> list[int]:
    """Poll until every key of ``keys`` (rank -> key) exists or ``deadline`` (monotonic) passes.

    Returns the ranks whose keys are still missing at the deadline, lowest first; ``[]`` if all
    arrived. A key that lands between the last poll and the deadline still counts as arrived.
    ``abort`` (optional) is called on every poll and may raise to end the wait early.
    """
    wanted = list(keys.values())
    delay = _FIRST_POLL_S
    while not store.check(wanted):
        if abort is not None:
            abort()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return sorted(r for r, k in keys.items() if not store.check([k]))
        time.sleep(min(delay, remaining))  # a poll interval bounded by the deadline, not a sync
        delay = min(2 * delay, _MAX_POLL_S)
    return []


def _await_ranks(
    tp: TPGroup, store: dist.Store, key: str, ranks: Iterable[int], *, timeout_s: float, op: str, step: str,
    epoch: int, abort=None,
) -> None:
    """Wait for ``f"{key}/{r}"`` of every ``r`` in ``ranks``; raise naming the lowest one missing."""
    missing = _missing(store, {r: f"{key}/{r}" for r in ranks}, time.monotonic() + timeout_s, abort)
    if missing:
        raise FluxliteTimeoutError(op=op, what=f"arrival at {step}", rank=tp.rank, peer=missing[0],
                                   epoch=epoch, timeout_s=timeout_s, step=step)


def _arrive(
    tp: TPGroup, key: str, value: str, *, timeout_s: float, op: str, step: str, epoch: int, abort=None,
) -> dist.Store:
    """Publish ``value`` as ``f"{key}/{rank}"``, then wait for every rank's; returns the store."""
    store = group_store(tp)
    store.set(f"{key}/{tp.rank}", value)
    _await_ranks(tp, store, key, range(tp.world_size), timeout_s=timeout_s, op=op, step=step, epoch=epoch,
                 abort=abort)
    return store


def barrier(tp: TPGroup, key: str, *, timeout_s: float, op: str, step: str, epoch: int = 0) -> None:
    """Return once every rank of ``tp`` has called ``barrier`` with ``key``.

    Raises FluxliteTimeoutError naming the lowest rank that has not arrived after ``timeout_s``.
    ``key`` must be unique per use (see the module docstring); ``op``, ``step`` and ``epoch`` only
    go into the error.
    """
    if tp.world_size > 1:
        _arrive(tp, key, "", timeout_s=timeout_s, op=op, step=step, epoch=epoch)


def broadcast_str(
    tp: TPGroup, key: str, value: str | None, *, src: int = 0, timeout_s: float, op: str, step: str,
    epoch: int = 0,
) -> str:
    """Return group rank ``src``'s ``value`` on every rank (others pass anything, e.g. None).

    ``src`` publishes and returns at once, without waiting for the others; a rank that is not
    ``src`` raises FluxliteTimeoutError naming ``src`` if its value has not come after ``timeout_s``.
    """
    if not 0 <= src < tp.world_size:
        raise ValueError(f"src must be a rank of the group (0 to {tp.world_size - 1}), got {src}")
    if tp.rank == src:
        if not isinstance(value, str):
            raise TypeError(f"value on the src rank must be a str, got {type(value).__name__}")
        if tp.world_size > 1:
            group_store(tp).set(f"{key}/{src}", value)
        return value
    store = group_store(tp)
    _await_ranks(tp, store, key, [src], timeout_s=timeout_s, op=op, step=step, epoch=epoch)
    return store.get(f"{key}/{src}").decode()


def all_gather_str(
    tp: TPGroup, key: str, value: str, *, timeout_s: float, op: str, step: str, epoch: int = 0, abort=None,
) -> list[str]:
    """Every rank contributes ``value``; every rank gets the list of all of them, in group-rank order.

    Also a barrier. Raises FluxliteTimeoutError naming the lowest rank whose value has not come
    after ``timeout_s``. ``abort`` (optional) is called while waiting and may raise to give up early.
    """
    if not isinstance(value, str):
        raise TypeError(f"value must be a str, got {type(value).__name__}")
    if tp.world_size == 1:
        return [value]
    store = _arrive(tp, key, value, timeout_s=timeout_s, op=op, step=step, epoch=epoch, abort=abort)
    return [store.get(f"{key}/{r}").decode() for r in range(tp.world_size)]


def all_gather_int(
    tp: TPGroup, key: str, value: int, *, timeout_s: float, op: str, step: str, epoch: int = 0, abort=None,
) -> list[int]:
    """:func:`all_gather_str` of an int."""
    value = operator.index(value)  # an int, not a float that str() would publish as "3.0"
    return [int(v) for v in all_gather_str(tp, key, str(value), timeout_s=timeout_s, op=op, step=step,
                                           epoch=epoch, abort=abort)]
