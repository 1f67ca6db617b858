"""SM-copy producer for AG-GEMM: a few programs pull the peers' staged rows into the gathered buffer.

Math
----
For each peer ``p`` in schedule order (``r+1, r+2, ...``), once ``p``'s rows are staged
(``ready[p] >= epoch``, a bounded acquire wait)::

    gathered[p*m + i, k] = staged_p[i, k]        for i in split s's rows, s = 0, 1, ..., k < K

where ``staged_p`` is ``p``'s symmetric staging buffer ``[m, K]``, mapped in this process
(``peer_ptrs[p]``). A split is cut into ``BLOCK_R x BLOCK_K`` tiles that the ``NUM_PROGS``
programs share round-robin. Each program, when its share of split ``s`` is stored, adds one to
the ``(p, s)`` counter (release); the program that brings it to ``NUM_PROGS`` sets the data flag
``(p, s)`` to ``epoch`` (release, system scope; cumulativity publishes every program's stores),
which the GEMM's row blocks of that split wait on.

This is the alternative to the copy-engine producer (``Tuning.ag_producer = "sm"``). It runs on the
producer stream beside the persistent GEMM and needs its programs resident next to the GEMM's:
four warps and no shared memory fit beside one GEMM program per SM. If a peer never stages its
rows the wait records ``ERR_AG_STAGED`` and the program stops; the GEMM's waits then see the record
and stop too.
"""

import triton
import triton.language as tl

from .. import errors
from .flags import signal_add, wait_epoch

ERR_AG_STAGED = tl.constexpr(errors.ERR_AG_STAGED)


@triton.jit(do_not_specialize=["m", "rank", "world_size", "splits", "epoch", "timeout_ns"])
def pull_chunks_kernel(
    peer_ptrs,       # int64 [W]: every rank's staging buffer [m, K] (this call's parity), mapped here
    gathered,        # [W*m, K] destination
    flags_ptr,       # int32 local flag array: ready slots [0, W), then the AG data slots
    counters_ptr,    # int32 [W * MAX_SPLITS + 1], zeroed per call: programs done per (peer, split)
    error_ptr,       # int32 [8] error record (shared with the GEMM)
    split_rows_ptr,  # int32 [splits + 1]: split s covers rows [split_rows[s], split_rows[s+1]) of a chunk
    m, K, rank, world_size, splits, epoch, timeout_ns,
    MAX_SPLITS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_PROGS: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    pid = tl.program_id(0)
    n_k = tl.cdiv(K, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    offs_k = tl.arange(0, BLOCK_K)
    err = tl.full((), 0, tl.int32)
    for step in range(1, world_size):
        p = (rank + step) % world_size
        if err == 0:
            err = wait_epoch(flags_ptr + p, epoch, error_ptr, timeout_ns, ERR_AG_STAGED, p, p, p, 0, INTERPRET)
        if err == 0:
            # Symmetric buffers are 256-byte aligned: say so, or the loads are not vectorised.
            src = tl.multiple_of(tl.load(peer_ptrs + p).to(tl.pointer_type(gathered.dtype.element_ty)), 16)
            dst = gathered + p.to(tl.int64) * m * K
            for s in range(0, splits):
                lo = tl.load(split_rows_ptr + s)
                hi = tl.load(split_rows_ptr + s + 1)
                for t in range(pid, tl.cdiv(hi - lo, BLOCK_R) * n_k, NUM_PROGS):
                    rows = lo + (t // n_k) * BLOCK_R + offs_r
                    cols = (t % n_k) * BLOCK_K + offs_k
                    mask = (rows < hi)[:, None] & (cols < K)[None, :]
                    offs = rows.to(tl.int64)[:, None] * K + cols[None, :]
                    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)
                if signal_add(counters_ptr + p * MAX_SPLITS + s, 1) == NUM_PROGS - 1:
                    slot = world_size + p * MAX_SPLITS + s  # schedule.ag_data_slot
                    tl.atomic_max(flags_ptr + slot, epoch, sem="release", scope="sys")


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402


@dataclass(frozen=True)
class PullConfig:
    """Tile and launch shape of :func:`pull_chunks_kernel`."""

    block_r: int = 32  # 32 x 256 bf16 per step: 8 x 16-byte loads in flight per thread at 64 registers
    block_k: int = 256
    num_progs: int = 32  # enough loads in flight to cover NVLink latency; each fits beside a GEMM program
    num_warps: int = 4


INTERPRET_PULL_CONFIG = PullConfig(block_r=16, block_k=32, num_progs=2, num_warps=4)


def launch(*, peer_ptrs: torch.Tensor, gathered: torch.Tensor, flags: torch.Tensor, counters: torch.Tensor,
           error: torch.Tensor, split_rows: torch.Tensor, m: int, rank: int, world_size: int, epoch: int,
           timeout_s: float, max_splits: int, config: PullConfig, interpret: bool) -> None:
    """Pull every peer's staged ``[m, K]`` rows into ``gathered [W*m, K]`` (see the module docstring)."""
    K = gathered.shape[1]
    pull_chunks_kernel[(config.num_progs,)](
        peer_ptrs, gathered, flags, counters, error, split_rows,
        m, K, rank, world_size, split_rows.numel() - 1, epoch, int(timeout_s * 1e9),
        MAX_SPLITS=max_splits, BLOCK_R=config.block_r, BLOCK_K=config.block_k, NUM_PROGS=config.num_progs,
        INTERPRET=interpret, num_warps=config.num_warps, num_stages=1,
    )
