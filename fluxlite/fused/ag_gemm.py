"""Fused AllGather-GEMM: the producer program, the CPU consumer and the GPU launch.

Rank ``r``, a call of parity ``P`` (data half and flag region ``P``). Flags are set (``= 1``) and
cleared by their owner at the start of the next call (:mod:`fluxlite.kernels.align`). The consumer
reads its own rows in place from ``a`` and each peer's from ``gathered`` once that peer's (chunk,
split) flag is set::

    push (the caller does not keep the gathered input; ``gathered`` is our symmetric buffer):
      align:    every peer p: p.signature[P][r] <- ours; p.ready[r] = 1
      producer: for p in r-1, r-2, ...: p.gathered[r] <- a, split by split, p.pushed (r, s) = 1
    pull (``gathered`` is a fresh tensor that the caller keeps, e.g. for a backward):
      align:    every peer p: p.signature[P][r] <- ours
      producer: staging[r] <- a;  every peer p: p.ready[r] = 1          # our rows may now be pulled
                gathered[r] <- a                                        # for the caller
                for p in r+1, r+2, ...: wait ready[p] >= 1
                                        gathered[p] <- p.staging, split by split, pulled (p, s) = 1
    consumer: for each row block (schedule order): a peer's block waits for the peer's ready flag,
              checks its signature, waits for the (chunk, split) flag; out = epilogue(A @ W.T)

With a row scale (the deferred norm's 1/sigma, :mod:`fluxlite.epilogue`) each rank's ``[m]`` fp32
scales travel with its rows: pushed into the peers' scale area before the first split's flag, or
staged beside the staged rows and pulled before the first split.
"""

from __future__ import annotations

import torch

from .. import schedule as sch
from .._sequential import epilogue_linear
from ..epilogue import PLAIN, Epilogue
from ..kernels import ag_gemm as kernel
from ..kernels.gemm_core import GemmConfig
from ..workspace import DATA_ALIGN
from .call import Call, Plan, get_plan
from . import producer
from .producer import COPY, SIGNAL, WAIT
from .state import FusedState


def _scales_offset(rows: int, row_bytes: int) -> int:
    """Where the row scales sit in a data half: after ``rows`` rows, aligned as a workspace view."""
    return -(-rows * row_bytes // DATA_ALIGN) * DATA_ALIGN


def _steps(call: Call, a: torch.Tensor, gathered: torch.Tensor, push: bool, row_scale: torch.Tensor | None,
           scale_gathered: torch.Tensor | None) -> list:
    """The producer program (:mod:`fluxlite.fused.producer`) of ``call``: it depends on the plan,
    the data half and the addresses of ``a``, ``gathered`` and the scales, not on the call."""
    ws, plan, parity = call.ws, call.plan, call.parity
    W, r = ws.world_size, ws.rank
    m = a.shape[0]
    row = a.shape[1] * a.element_size()
    src = a.data_ptr()
    if push:
        steps = []
        # Peer p reads our chunk after its own: p = r-1 reaches it first, then r-2, ...
        for p in sorted(plan.sched.peers(), key=lambda p: (r - p) % W):
            dest = ws.data_addr(p, parity) + r * m * row
            if row_scale is not None:  # before the first split's flag, which orders it for the peer
                steps.append((COPY, ws.data_addr(p, parity) + _scales_offset(W * m, row) + 4 * r * m,
                              row_scale.data_ptr(), 4 * m))
            for s, (lo, hi) in enumerate(plan.split_rows):
                steps += [(COPY, dest + lo * row, src + lo * row, (hi - lo) * row),
                          (SIGNAL, call.flag_addr(p, sch.data_slot(W, r, s)), sch.SET)]
        return steps
    dst = gathered.data_ptr()
    staged_scales = _scales_offset(m, row)
    steps = [(COPY, ws.data_addr(r, parity), src, m * row)]  # staged for the peers to pull
    if row_scale is not None:
        steps.append((COPY, ws.data_addr(r, parity) + staged_scales, row_scale.data_ptr(), 4 * m))
    steps += [(SIGNAL, call.flag_addr(p, sch.ready_slot(r)), sch.SET) for p in plan.sched.peers()]
    steps.append((COPY, dst + r * m * row, src, m * row))  # only for the caller: nothing waits on it
    for p in plan.sched.peers():
        steps.append((WAIT, call.flag_addr(r, sch.ready_slot(p)), sch.SET, dict(what="staged rows", peer=p, chunk=p)))
        staged = ws.data_addr(p, parity)
        if row_scale is not None:
            steps.append((COPY, scale_gathered.data_ptr() + 4 * p * m, staged + staged_scales, 4 * m))
        for s, (lo, hi) in enumerate(plan.split_rows):
            steps += [(COPY, dst + (p * m + lo) * row, staged + lo * row, (hi - lo) * row),
                      (SIGNAL, call.flag_addr(r, sch.pulled_slot(W, p, s)), sch.SET)]
    return steps


def prepare(state: FusedState, a: torch.Tensor, weight: torch.Tensor, *, timeout_s: float, keep_gathered: bool,
            ep: Epilogue = PLAIN, config: GemmConfig | None = None) -> Plan:
    """The plan of a fused AG-GEMM of these operands' shapes, with room for it in the workspace
    (collective when the workspace grows). A later call of the same shapes may reuse it as it is."""
    state.check()  # a poisoned workspace raises before it could enter a collective growth
    m, K = a.shape
    plan = get_plan(state, "ag", m, K, weight.shape[0], a.dtype, keep_gathered, ep, config)
    rows_here = state.ws.world_size * m if not keep_gathered else m
    row = K * a.element_size()
    state.reserve(_scales_offset(rows_here, row) + (4 * rows_here if ep.row_scaled else 0), timeout_s=timeout_s,
                  signature=plan.signature)
    return plan


def ag_gemm(state: FusedState, plan: Plan, a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
            timeout_s: float, out: torch.Tensor | None = None, keep_gathered: bool = True, ep: Epilogue = PLAIN,
            row_scale: torch.Tensor | None = None):
    """Fused AG-GEMM by ``plan`` (:func:`prepare`). ``a: [m, K]``, ``weight: [N, K]`` (``[2N, K]`` for
    SwiGLU), ``row_scale: [m]`` fp32 when ``ep.row_scaled`` -> ``([W*m, N], gathered [W*m, K])``,
    ``out = ep(gathered @ weight.T)``.

    ``keep_gathered=False``: the caller does not keep the gathered input, so the rows are pushed
    into the peers' workspaces (one copy fewer); the second item is then ``None``.
    """
    ws = state.ws
    W, r = ws.world_size, ws.rank
    m, K = a.shape
    state.check()
    push = not keep_gathered
    row = K * a.element_size()
    call = Call(state, "ag_gemm", plan, timeout_s)
    sched = plan.sched
    if push:  # the peers push into our data half
        gathered, scale_gathered = call.views(lambda: (
            ws.data(r, call.parity, (W * m, K), a.dtype),
            ws.data(r, call.parity, (W * m,), torch.float32, offset=_scales_offset(W * m, row)) if ep.row_scaled
            else None))
    else:  # pulled into tensors that the caller keeps
        gathered = a.new_empty((W * m, K))
        scale_gathered = row_scale.new_empty(W * m) if ep.row_scaled else None
    if out is None:
        out = a.new_empty((W * m, ep.out_features(weight.shape[0])))

    def consume_torch() -> None:
        for chunk, row0, rows, split in sched.rows():
            rows_ = slice(chunk * m + row0, chunk * m + row0 + rows)
            if chunk == r:
                scales = None if row_scale is None else row_scale[row0 : row0 + rows]
                epilogue_linear(out[rows_], a[row0 : row0 + rows], weight, bias, ep, scales)
                continue
            slot = (sch.data_slot if push else sch.pulled_slot)(W, chunk, split)
            call.wait_peer(slot, peer=chunk, chunk=chunk, split=split, what="gathered rows")
            scales = None if scale_gathered is None else scale_gathered[rows_]
            epilogue_linear(out[rows_], gathered[rows_], weight, bias, ep, scales)

    def consume_triton() -> None:
        kernel.launch(a_local=a, gathered=gathered, weight=weight, out=out, bias=bias, ep=ep,
                      scale_local=row_scale, scale_gathered=scale_gathered, local_tiles=sched.local_tiles(plan.num_n),
                      **call.kernel_args())

    # The producer's own tensors (not the workspace's, whose buffers change only with its generation,
    # which drops every program and graph): what its program and a replay's check depend on.
    own = (a, row_scale) if push else (a, gathered, row_scale, scale_gathered)
    copied = tuple(t.data_ptr() for t in own if t is not None)

    def program() -> producer.Program:
        return call.program(copied, lambda: _steps(call, a, gathered, push, row_scale, scale_gathered))

    call.run(program, consume_triton if plan.consumer == "triton" else consume_torch,
             call.replay_key(a, gathered, row_scale, scale_gathered, weight, out, bias, scale=ep.scale), copied)
    return out, (None if push else gathered)
