"""fluxlite's exceptions.

Every bounded wait ends in :class:`FluxliteTimeoutError` when a peer never arrives, so a missing rank
turns into an exception that names who waited on whom, at which step and epoch, instead of a hung
job. Ranks that arrive at the same fused call with different arguments get
:class:`FluxliteCallMismatchError` on every rank, before any of them consumes the other's data.
"""

from __future__ import annotations


class FluxliteError(RuntimeError):
    """Base class of fluxlite's runtime errors."""


class FluxliteTimeoutError(FluxliteError, TimeoutError):
    """A bounded wait ran out: a peer never signalled a flag, or never arrived at a collective step.

    Attributes: ``op`` (the fused op, or the workspace step), ``what`` (what was awaited), the
    waiting ``rank``, the ``peer`` that never arrived, the ``step`` (``"flag"`` for a wait on a
    readiness flag, else the name of the collective step), ``epoch`` (the call number the waiter
    needed), ``timeout_s``, and for flag waits the ``chunk`` and ``split`` the flag guards and the
    flag value ``seen``.
    """

    def __init__(
        self,
        *,
        op: str,
        what: str,
        rank: int,
        peer: int,
        epoch: int,
        timeout_s: float,
        chunk: int = -1,
        split: int = 0,
        seen: int | None = None,
        step: str = "flag",
    ) -> None:
        self.op, self.what, self.step = op, what, step
        self.rank, self.peer, self.chunk, self.split = rank, peer, chunk, split
        self.epoch, self.seen, self.timeout_s = epoch, seen, timeout_s
        if step == "flag":
            where = (f"(chunk {chunk}, split {split}, epoch {epoch}) but the flag holds {seen}; the peer "
                     f"never signalled")
        else:
            where = f"at step '{step}' (epoch {epoch}); the peer never arrived"
        super().__init__(
            f"fluxlite {op}: rank {rank} waited {timeout_s:g} s for {what} from peer rank {peer} {where}. "
            f"Every rank of the group must call the same fluxlite ops in the same order. The workspace "
            f"is left poisoned: later fused calls on it raise until fluxlite.release_workspaces() is "
            f"called on every rank."
        )


class FluxliteCallMismatchError(FluxliteError):
    """Two ranks are in different fused calls: another op, shape, dtype or option, or another epoch.

    ``mine`` and ``theirs`` are the two calls' descriptions (op, rows, K, N, dtype, options, epoch).
    Raised on every rank that sees a peer's call differ from its own, before its data is used.
    """

    def __init__(self, *, rank: int, peer: int, mine: str, theirs: str) -> None:
        self.rank, self.peer, self.mine, self.theirs = rank, peer, mine, theirs
        super().__init__(
            f"fluxlite: rank {rank} and peer rank {peer} are in different fused calls: rank {rank} is in "
            f"{mine}, peer rank {peer} is in {theirs}. Every rank of the group must make the same fused "
            f"calls, in the same order, with the same shapes. The workspace is left poisoned: call "
            f"fluxlite.release_workspaces() on every rank before the next fused call."
        )
