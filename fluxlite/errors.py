"""fluxlite's exceptions.

Every bounded wait on a flag ends in :class:`FluxliteTimeoutError` when the peer never arrives, so a
missing rank turns into an exception that names who waited on what, instead of a hung job.
"""

from __future__ import annotations


class FluxliteError(RuntimeError):
    """Base class of fluxlite's runtime errors."""


class FluxliteTimeoutError(FluxliteError, TimeoutError):
    """A bounded wait on a readiness flag ran out.

    Attributes name the waiting ``rank``, the ``peer`` whose signal never came, the ``chunk`` (and
    sub-chunk ``split``) the flag guards, the ``epoch`` the waiter needed and the flag ``value`` seen.
    """

    def __init__(
        self,
        *,
        op: str,
        what: str,
        rank: int,
        peer: int,
        chunk: int,
        epoch: int,
        seen: int,
        timeout_s: float,
        split: int = 0,
    ) -> None:
        self.op, self.what = op, what
        self.rank, self.peer, self.chunk, self.split = rank, peer, chunk, split
        self.epoch, self.seen, self.timeout_s = epoch, seen, timeout_s
        super().__init__(
            f"fluxlite {op}: rank {rank} waited {timeout_s:g} s for {what} from peer rank {peer} "
            f"(chunk {chunk}, split {split}, epoch {epoch}) but the flag holds {seen}; the peer "
            f"never signalled. Every rank of the group must call the same fluxlite ops in the "
            f"same order. The workspace is left poisoned: later fused calls on it raise."
        )


ERR_AG_DATA = 1
"""Kernel error code: an AG-GEMM row block timed out waiting for its gathered rows."""
ERR_RS_PARTIAL = 2
"""Kernel error code: a GEMM-RS row block timed out waiting for a peer's partials."""
ERR_AG_STAGED = 3
"""Kernel error code: the SM-copy AG producer timed out waiting for a peer's staged rows."""


def timeout_from_record(rec: list[int], *, rank: int, timeout_s: float) -> FluxliteTimeoutError:
    """The exception for a kernel's error record ``[code, slot, epoch, seen, peer, chunk, split, _]``."""
    code, _slot, epoch, seen, peer, chunk, split, _ = rec
    what = {ERR_AG_DATA: "gathered rows", ERR_RS_PARTIAL: "partials", ERR_AG_STAGED: "staged rows"}.get(code, f"flag (code {code})")
    return FluxliteTimeoutError(op="fused kernel", what=what, rank=rank, peer=peer, chunk=chunk, split=split,
                                epoch=epoch, seen=seen, timeout_s=timeout_s)
