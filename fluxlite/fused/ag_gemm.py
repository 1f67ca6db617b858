"""Fused AllGather-GEMM: the producer program, the CPU consumer and the GPU launch.

Rank ``r``, call ``e``, data parity ``e % 2``. The consumer reads its own rows in place from ``a``
and each peer's from ``gathered`` once that peer's (chunk, split) flag is set::

    push (the caller does not keep the gathered input; ``gathered`` is our symmetric buffer):
      producer: every peer p: p.signature[r] <- ours; p.ready[r] = e
                for p in r-1, r-2, ...: p.gathered[r] <- a, split by split, p.pushed (r, s) = e
    pull (``gathered`` is a fresh tensor that the caller keeps, e.g. for a backward):
      producer: every peer p: p.signature[r] <- ours
                staging[r] <- a;  every peer p: p.ready[r] = e          # our rows may now be pulled
                gathered[r] <- a                                        # for the caller
                for p in r+1, r+2, ...: wait ready[p] >= e
                                        gathered[p] <- p.staging, split by split, pulled (p, s) = e
    consumer: for each row block (schedule order): a peer's block waits for the peer's ready flag,
              checks its signature, waits for the (chunk, split) flag; out = A @ W.T + b
"""

from __future__ import annotations

import torch

from .. import schedule as sch
from .._sequential import linear_into
from ..kernels import ag_gemm as kernel
from ..workspace import SymmetricWorkspace
from .call import Call, get_plan
from .producer import COPY, SIGNAL, WAIT


def _steps(call: Call, a: torch.Tensor, gathered: torch.Tensor, push: bool) -> list:
    ws, plan, e, parity = call.ws, call.plan, call.epoch, call.parity
    W, r = ws.world_size, ws.rank
    m = a.shape[0]
    row = a.shape[1] * a.element_size()
    src = a.data_ptr()
    if push:
        steps = call.arrival_steps()
        # Peer p reads our chunk after its own: p = r-1 reaches it first, then r-2, ...
        for p in sorted(plan.sched.peers(), key=lambda p: (r - p) % W):
            dest = ws.data_addr(p, parity) + r * m * row
            for s, (lo, hi) in enumerate(plan.split_rows):
                steps += [(COPY, dest + lo * row, src + lo * row, (hi - lo) * row),
                          (SIGNAL, ws.flag_addr(p, sch.data_slot(W, r, s)), e)]
        return steps
    dst = gathered.data_ptr()
    steps = call.signature_steps()
    steps.append((COPY, ws.data_addr(r, parity), src, m * row))  # staged for the peers to pull
    steps += [(SIGNAL, ws.flag_addr(p, sch.ready_slot(r)), e) for p in plan.sched.peers()]
    steps.append((COPY, dst + r * m * row, src, m * row))  # only for the caller: nothing waits on it
    for p in plan.sched.peers():
        steps.append((WAIT, ws.flag_addr(r, sch.ready_slot(p)), e, dict(what="staged rows", peer=p, chunk=p)))
        staged = ws.data_addr(p, parity)
        for s, (lo, hi) in enumerate(plan.split_rows):
            steps += [(COPY, dst + (p * m + lo) * row, staged + lo * row, (hi - lo) * row),
                      (SIGNAL, ws.flag_addr(r, sch.pulled_slot(W, p, s)), e)]
    return steps


def ag_gemm(ws: SymmetricWorkspace, a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
            timeout_s: float, out: torch.Tensor | None = None, keep_gathered: bool = True):
    """Fused AG-GEMM. ``a: [m, K]``, ``weight: [N_local, K]`` -> ``([W*m, N_local], gathered [W*m, K])``.

    ``keep_gathered=False``: the caller does not keep the gathered input, so the rows are pushed
    into the peers' workspaces (one copy fewer); the second item is then ``None``.
    """
    W, r = ws.world_size, ws.rank
    m, K = a.shape
    N = weight.shape[0]
    ws.check()  # a poisoned workspace raises before it could enter a collective growth
    plan = get_plan(ws, "ag", m, K, N, a.dtype, keep_gathered)
    push = not keep_gathered
    ws.reserve((W if push else 1) * a.numel() * a.element_size(), timeout_s=timeout_s, announce=plan.signature)
    call = Call(ws, "ag_gemm", plan, timeout_s)
    sched = plan.sched
    gathered = ws.data(r, call.parity, (W * m, K), a.dtype) if push else a.new_empty((W * m, K))
    if out is None:
        out = a.new_empty((W * m, N))

    def consume_torch() -> None:
        for chunk, row0, rows, split in sched.rows():
            rows_ = slice(chunk * m + row0, chunk * m + row0 + rows)
            if chunk == r:
                linear_into(out[rows_], a[row0 : row0 + rows], weight, bias)
                continue
            slot = (sch.data_slot if push else sch.pulled_slot)(W, chunk, split)
            call.wait_peer(slot, peer=chunk, chunk=chunk, split=split, what="gathered rows")
            linear_into(out[rows_], gathered[rows_], weight, bias)

    def consume_triton() -> None:
        kernel.launch(a_local=a, gathered=gathered, weight=weight, out=out, bias=bias, **call.kernel_args())

    call.run(_steps(call, a, gathered, push), consume_triton if plan.consumer == "triton" else consume_torch)
    return out, (None if push else gathered)
