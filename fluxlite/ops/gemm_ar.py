"""GEMM-AllReduce: ``scale * all_reduce(a @ weight.T) + bias`` on every rank, the whole op in one object.

``a: [M, K_local]`` on each of ``W`` ranks (the reduction dim split over them, the rows the same),
``weight: [N, K_local]`` -> ``[M, N]`` on every rank: the sum over ranks, then the scale and the
bias, once. Any ``M`` (a decode step's 1 row too): the rows are cut into ``W`` chunks of
``mc = ceil(M / W)`` rows, the last one cut short.

The fused protocol is two-shot, and its first shot is GEMM-RS's (:mod:`fluxlite.ops.gemm_rs`, the
same consumer kernel): every rank reduces one chunk of rows, then the ranks gather the reduced
chunks. Rank ``r``, a call of parity ``P``; ``recv: [W, mc, N]`` and ``red: [mc, N]`` are
symmetric (data half ``P``)::

    align:    every peer d: d.signature[P][r] <- ours; d.ready[r] = 1
    consumer: blocks of peer chunk d: partial[d] tile = A @ W.T; counter (d, s) += 1
              blocks of our chunk: wait for every peer's (p, s); red = scale * (A @ W.T + sum_p recv[p]) + b
    producer: for d in r+1, r+2, ...: for s: wait counter (d, s); d.recv[r] <- partial[d] rows of s; d.flag (r, s) = 1
              join (the consumer is done: red is complete)
              out[our rows] <- red;  every peer p: p.finished[r] = 1
              wait finished[p] of every peer p (bounded: a kernel on CUDA, not a stream wait)
              for p in r+1, r+2, ...: out[p's rows] <- p.red

A rank's ``red`` is read by its peers until they finish the call; it is written again two calls
later, after every peer has arrived at the call between (:mod:`fluxlite.kernels.align`), so no
barrier is needed. The gather runs once the rank's own reduction is complete: the reduce-scatter
half overlaps the GEMM, the gather half does not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import schedule as sch
from ..epilogue import apply as apply_epilogue
from ..fused import Call
from ..fused.producer import COPY, JOIN, SIGNAL, WAIT_FINISHED
from ..host_flags import REDUCED_ROWS
from ..workspace import view_offset
from .gemm_rs import GemmReduceScatter
from .op import Args


def _red_offset(world_size: int, chunk_rows: int, N: int, element_size: int) -> int:
    """Where ``red`` sits in a data half: after ``recv``, aligned as a workspace view."""
    return view_offset(world_size * chunk_rows * N * element_size)


class GemmAllReduce(GemmReduceScatter):
    """GEMM-RS's first shot (its schedule, slots, kernel and producer steps), then a gather."""

    name = "gemm_ar"
    code = 3
    rows_divisible = False  # any M: the chunks have ceil(M / W) rows, the last ones padded

    def out_shape(self, args: Args) -> tuple[int, int]:
        return args.a.shape[0], args.weight.shape[0]

    # ---- the references ----------------------------------------------------------------------------
    def sequential(self, args: Args) -> torch.Tensor:
        """The GEMM, the all-reduce, then the epilogue once."""
        partial = args.a @ args.weight.t()
        if args.tp.world_size > 1:
            dist.all_reduce(partial, group=args.tp.group)
        return self._finish(partial.to(torch.promote_types(args.a.dtype, torch.float32)), args)

    def decomposed(self, args: Args) -> torch.Tensor:
        """Row chunks: each chunk's all-reduce is in flight while the next chunk's GEMM computes."""
        a, weight = args.a, args.weight
        M = a.shape[0]
        chunk = -(-M // max(2, args.tp.world_size))
        partial = a.new_empty((M, weight.shape[0]))
        works = []
        for lo in range(0, M, chunk):
            torch.matmul(a[lo : lo + chunk], weight.t(), out=partial[lo : lo + chunk])
            works.append(dist.all_reduce(partial[lo : lo + chunk], group=args.tp.group, async_op=True))
        for work in works:
            work.wait()
        return self._finish(partial.to(torch.promote_types(a.dtype, torch.float32)), args)

    def _finish(self, reduced: torch.Tensor, args: Args) -> torch.Tensor:
        y = apply_epilogue(reduced, args.ep, args.bias, None, args.a.dtype)
        return y if args.out is None else args.out.copy_(y)

    # ---- the tile protocol: GEMM-RS's, on chunks of ceil(M / W) rows, then the gather ------------------
    def chunk_rows(self, rows: int, world_size: int) -> int:
        return -(-rows // world_size)

    def reserve_bytes(self, world_size: int, M: int, N: int, element_size: int) -> int:
        """``recv`` for the chunks' partials, then ``red``, this rank's reduced chunk."""
        mc = self.chunk_rows(M, world_size)
        return _red_offset(world_size, mc, N, element_size) + mc * N * element_size

    def data_views(self, ws, rank: int, parity: int, chunk_rows: int, N: int, dtype: torch.dtype) -> tuple:
        W, size = ws.world_size, dtype.itemsize
        return (ws.data(rank, parity, (W, chunk_rows, N), dtype),
                ws.data(rank, parity, (chunk_rows, N), dtype, offset=_red_offset(W, chunk_rows, N, size)))

    def second_shot(self, call: Call, out: torch.Tensor) -> list:
        """The gather: once our consumer is done, our reduced chunk into ``out`` and announced to the
        peers; once every peer has announced its own (a bounded wait: WAIT_FINISHED), the peers'
        reduced chunks pulled into ``out``."""
        ws, plan, parity = call.ws, call.plan, call.parity
        W, r = ws.world_size, ws.rank
        mc = plan.sched.chunk_rows
        M, N = out.shape
        row = N * out.element_size()
        red_offset = _red_offset(W, mc, N, out.element_size())

        def rows_of(c: int) -> int:
            return max(0, min(mc, M - c * mc))

        steps = [(JOIN,)]
        if rows_of(r):
            steps.append((COPY, out.data_ptr() + r * mc * row, ws.data_addr(r, parity) + red_offset, rows_of(r) * row))
        steps += [(SIGNAL, call.flag_addr(p, sch.finished_slot(W, r)), sch.SET) for p in plan.sched.peers()]
        steps.append((WAIT_FINISHED, [(call.flag_addr(r, sch.finished_slot(W, p)), sch.SET,
                                       dict(what=REDUCED_ROWS, peer=p, chunk=p)) for p in plan.sched.peers()]))
        for p in plan.sched.peers():
            if rows_of(p):
                steps.append((COPY, out.data_ptr() + p * mc * row, ws.data_addr(p, parity) + red_offset,
                              rows_of(p) * row))
        return steps


AR = GemmAllReduce.define()


def gemm_ar(
    a: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    impl: str = "auto",
    timeout: float | None = None,
    out: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Multiply ``a`` by ``weight.T``, all-reduce (sum) over the group, then ``scale * reduced + bias``
    (once, after the reduction): the same ``[M, N]`` on every rank.

    A collective: every rank of the group calls it in the same order with the same shapes. It
    computes under ``torch.no_grad()``; :mod:`fluxlite.library` has it as a differentiable op. It is
    the Row layer's forward without sequence parallelism.

    Args:
        a: ``[M, K_local]``, this rank's slice of the reduction dim; any ``M``.
        weight: ``[N, K_local]`` (``nn.Linear`` layout).
        bias: ``[N]`` or ``None``; added once, after the reduction.
        group, impl, timeout: as in :func:`fluxlite.ag_gemm`.
        out: optional ``[M, N]`` tensor to write the result into.
        scale: a scalar multiplier of the reduced product, or ``None`` (1).

    Returns:
        ``[M, N]`` in ``a.dtype``, the same on every rank.
    """
    return AR(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out, scale=scale)
