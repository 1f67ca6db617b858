"""Fused GEMM-ReduceScatter: the producer program, the CPU consumer and the GPU launch.

Rank ``r``, a call of parity ``P``, ``mc = M / W`` rows per chunk; ``recv: [W, mc, N]`` is symmetric
(data half ``P``); flags are those of region ``P``, set to 1 and cleared by their owner::

    align:    every peer d: d.signature[P][r] <- ours; d.ready[r] = 1       (fluxlite.kernels.align)
    consumer: blocks of peer chunk d: partial[d] tile = A @ W.T; counter (d, s) += 1
              blocks of our chunk: for every peer p: wait ready[p], check its signature, wait (p, s);
                                   out = scale * (A @ W.T + sum_p recv[p]) + b      (fp32, fixed peer order)
    producer: for d in r+1, r+2, ...: for s: wait counter (d, s) == tiles of (d, s)
                                             d.recv[r] <- partial[d] rows of s; d.flag (r, s) = 1

The producer only ever waits on this rank's own counters, which the consumer always completes
(a kernel whose own wait timed out still computes and counts every peer tile).
"""

from __future__ import annotations

import torch

from .. import schedule as sch
from ..epilogue import PLAIN, Epilogue
from ..epilogue import apply as apply_epilogue
from ..flags import host_set_flag
from ..kernels import gemm_rs as kernel
from ..kernels.gemm_core import GemmConfig
from .call import Call, Plan, get_plan
from . import producer
from .producer import COPY, SIGNAL, WAIT
from .state import FusedState


def _steps(call: Call, partial: torch.Tensor) -> list:
    """The producer program (:mod:`fluxlite.fused.producer`) of ``call``: it depends on the plan,
    the data half and the address of ``partial``, not on the call."""
    ws, plan, parity = call.ws, call.plan, call.parity
    W, r = ws.world_size, ws.rank
    _, mc, N = partial.shape
    row = N * partial.element_size()
    counters = call.state.counters.data_ptr()
    steps = []
    for d in plan.sched.peers():
        dest = ws.data_addr(d, parity) + r * mc * row  # d's recv[r]
        src = partial.data_ptr() + d * mc * row  # our partial[d]
        for s, (lo, hi) in enumerate(plan.split_rows):
            steps += [
                (WAIT, counters + 4 * sch.counter_slot(d, s), plan.sched.split_tiles(s, plan.num_n),
                 dict(what="local partial tiles", peer=r, chunk=d, split=s)),
                (COPY, dest + lo * row, src + lo * row, (hi - lo) * row),
                (SIGNAL, call.flag_addr(d, sch.data_slot(W, r, s)), sch.SET),
            ]
    return steps


def prepare(state: FusedState, a: torch.Tensor, weight: torch.Tensor, *, timeout_s: float, ep: Epilogue = PLAIN,
            config: GemmConfig | None = None) -> Plan:
    """The plan of a fused GEMM-RS of these operands' shapes, with room for it in the workspace
    (collective when the workspace grows). A later call of the same shapes may reuse it as it is."""
    state.check()
    M, K = a.shape
    N = weight.shape[0]
    plan = get_plan(state, "rs", M, K, N, a.dtype, False, ep, config)
    state.reserve(M * N * a.element_size(), timeout_s=timeout_s, signature=plan.signature)
    return plan


def gemm_rs(state: FusedState, plan: Plan, a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
            timeout_s: float, out: torch.Tensor | None = None, ep: Epilogue = PLAIN) -> torch.Tensor:
    """Fused GEMM-RS by ``plan`` (:func:`prepare`). ``a: [M, K_local]``, ``weight: [N, K_local]`` ->
    ``[M/W, N]``; ``ep`` (a scale only) applies to the reduced sum, with the bias."""
    ws = state.ws
    W, r = ws.world_size, ws.rank
    M, K = a.shape
    N = weight.shape[0]
    mc = M // W
    state.check()
    call = Call(state, "gemm_rs", plan, timeout_s)
    sched = plan.sched
    recv = call.views(lambda: ws.data(r, call.parity, (W, mc, N), a.dtype))  # slot p: rank p's partial of our rows
    partial = a.new_empty((W, mc, N))  # our partials of the peers' rows, before they leave
    if out is None:
        out = a.new_empty((mc, N))
    acc_dtype = torch.promote_types(a.dtype, torch.float32)  # sum the partials in fp32 (fp64 stays fp64)

    def consume_torch() -> None:
        done = [0] * state.counters.numel()
        for chunk, row0, rows, split in sched.rows():
            src = a[chunk * mc + row0 : chunk * mc + row0 + rows]
            if chunk != r:
                torch.matmul(src, weight.t(), out=partial[chunk, row0 : row0 + rows])
                slot = sch.counter_slot(chunk, split)
                done[slot] += 1
                host_set_flag(state.counters, slot, done[slot])
                continue
            acc = (src @ weight.t()).to(acc_dtype)
            for p in sched.peers():
                call.wait_peer(sch.data_slot(W, p, split), peer=p, chunk=r, split=split, what="partials")
                acc += recv[p, row0 : row0 + rows]
            out[row0 : row0 + rows] = apply_epilogue(acc, ep, bias, None, out.dtype)

    def consume_triton() -> None:
        kernel.launch(a=a, weight=weight, out=out, bias=bias, partial=partial, recv=recv,
                      peer_tiles=plan.tiles.shape[0] - sched.local_tiles(plan.num_n), counters=state.counters,
                      rank=r, ep=ep, **call.kernel_args())

    copied = (partial.data_ptr(),)

    def program() -> producer.Program:
        return call.program(copied, lambda: _steps(call, partial))

    call.run(program, consume_triton if plan.consumer == "triton" else consume_torch,
             call.replay_key(a, partial, weight, out, bias, scale=ep.scale), copied)
    return out
