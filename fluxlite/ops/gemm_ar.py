"""GEMM-AllReduce: ``scale * all_reduce(a @ weight.T) + bias`` on every rank, the whole op in one object.

``a: [M, K_local]`` on each of ``W`` ranks (the reduction dim split over them, the rows the same),
``weight: [N, K_local]`` -> ``[M, N]`` on every rank: the sum over ranks, then the scale and the
bias, once. Any ``M`` (a decode step's 1 row too).

The fused protocol has two paths, chosen by the bytes a rank would read from its peers in one shot
(:meth:`GemmAllReduce.one_shot`, :data:`ONE_SHOT_MAX_BYTES`): the same on every rank of a call, since it depends
only on what the call signature holds.

**One-shot** (small calls: decode). Rank ``r``, a call of parity ``P``; every rank's partial
``[M, N]`` sits at the start of its data half ``P`` (symmetric)::

    align:  every peer d: d.signature[P][r] <- ours; d.ready[r] = 1
    GEMM:   partial = a @ weight.T, into our data half P                (cuBLAS: fluxlite._sequential.linear_into)
    reduce: every peer d: d.finished[r] = 1; wait for every peer's ready, signature and finished
            (bounded); out = scale * sum_q partial_q + b, q in rank order, each read where it lies
            (one kernel on CUDA, kernels/one_shot.py, reading the peers' memory; the /dev/shm
            mappings on CPU)

No producer step and no copy: three launches on CUDA. A rank's partial is written again two calls
later, once every peer has finished this call, so no barrier ends it.

**Two-shot** (the rest); its first shot is GEMM-RS's (:mod:`fluxlite.ops.gemm_rs`, the same consumer
kernel): the rows are cut into ``W`` chunks of ``mc = ceil(M / W)`` rows, the last one cut short;
every rank reduces one chunk, straight into its rows of ``out``, then the ranks gather the reduced
chunks. ``recv: [W, mc, N]`` and ``gathered: [W, mc, N]`` are symmetric (data half ``P``)::

    align:    every peer d: d.signature[P][r] <- ours; d.ready[r] = 1
    consumer: blocks of peer chunk d: partial[d] tile = A @ W.T; counter (d, s) += 1
              blocks of our chunk: wait for every peer's (p, s);
                                   out[our rows] = scale * (A @ W.T + sum_p recv[p]) + b; counter (r, s) += 1
    producer: for d in r+1, r+2, ...: for s: wait counter (d, s); d.recv[r] <- partial[d] rows of s; d.flag (r, s) = 1
              for s: wait counter (r, s); every peer p: p.gathered[r] <- out[our rows] of s; p.reduced[r][s] = 1
    end:      (behind the consumer, beside the producer's last copies; one kernel on CUDA)
              for s: wait reduced[p][s] of every peer p (bounded: a kernel's wait on CUDA, not a stream wait)
                     for every peer p: out[p's rows] <- gathered[p], its split s

The reduced rows leave split by split while the consumer still computes the rest of our chunk, so
most of the gather overlaps the GEMM; what remains after it is the end: the copy engines' backlog
(the last split's copy, and on calls short of compute the earlier ones too), the flags and the
waits, and the copy of the peers' last split within this GPU; the peers' earlier splits are copied
out beside that backlog. Hence finer splits than
GEMM-RS's (:meth:`GemmAllReduce.schedule`): the last one's copy is not hidden. The matmul consumer
(one cuBLAS GEMM per split) has few splits, each GEMM a few waves; where the last eighth of a chunk
still fills about a wave (:data:`TAPER_MIN_TILES`) its splits are tapered, a half, three eighths
and an eighth (:data:`fluxlite.schedule.TAPER`): the last copy an eighth of the chunk's rows, each
earlier one beside the next split's GEMM. Every split's copy is the copy engine's; the end is one
kernel on the consumer's stream (:meth:`GemmAllReduce.second_shot_end`), which starts right behind
its last GEMM and copies each of the peers' splits out as soon as it lands.
``gathered`` is written by the peers in this call and written again two calls later, after every
peer has arrived at the call between (:mod:`fluxlite.kernels.align`), so no barrier is needed.

Where the output's rows are off 16 bytes and the GEMM is large enough, the two shots run on whole
rows, as GEMM-RS's do (:meth:`~fluxlite.ops.gemm_rs.GemmReduceScatter.whole_output_rows`): the
weight padded to ``Np`` columns and every buffer above ``Np`` wide. The consumer then writes our
reduced chunk into our own rows of ``gathered``, the pushes leave from there, and the end crops every
chunk's first ``N`` columns into ``out``, ours first (:meth:`GemmAllReduce.reduced_rows`,
:mod:`fluxlite.kernels.gather_end`). On two H200s that took 0.89-1.01x the time of a crop after
the call, and 0.57-0.68x that of the call on rows as given (BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch
import torch.distributed as dist

from .. import schedule as sch
from .._sequential import linear_into
from ..epilogue import PLAIN
from ..epilogue import apply as apply_epilogue
from ..fused import Call
from ..fused.call import CPU_BLOCK_M
from ..fused.producer import COPY, SIGNAL, WAIT
from ..host_flags import REDUCED_ROWS, host_wait
from ..kernels import gather_end, gemm_core
from ..workspace import view_offset
from .gemm_rs import ONE_SHOT, GemmReduceScatter
from .op import Args

ONE_SHOT_MAX_BYTES = 16 << 20
"""The most bytes a rank may read from its peers in a one-shot call, ``(W - 1) * M * N *
element_size``; a larger call is two-shot.

Per rank the one-shot reads ``W - 1`` whole partials in one step after the GEMM, with no copy and
one flag round trip; the two-shot moves ``2 (W - 1) / W`` partials in two dependent steps, through
some ten dependent launches, copies and flag waits of a few microseconds each, and overlaps its
first step with its GEMM. At ``W = 2`` both move one partial per rank, so the one-shot costs no
bytes more and saves the steps; at ``W = 8`` it reads four times the two-shot's bytes. Measured at
two ranks on two H200s, both paths forced and interleaved (BENCHMARKS.md, "GEMM-AllReduce's one-shot
reduction read as one run"): the one shot was 0.57-0.88x the two shots' time at the three shapes of
8-16 MiB; at 32 MiB the paths split (0.90-1.05x over four shapes); from 41 MiB the two shots won
(their first shot overlapping the GEMM: 8192x4096->8192 at 0.77x the sequential against 0.96x)
except at ``K`` = 2048, a tie. At ``W = 4`` the budget is a partial of 5.3 MiB, at ``W = 8`` 2.3
MiB; those sizes were not measured. It is read at every call, and each path has a plan of its
own; a repeated call keeps its first call's plan, and so its path (a test that changes it releases
the workspaces, or gives each path's calls a timeout of their own)."""


TAPERED = "tapered"  # a plan variant: two shots with tapered splits

ROW_BLOCKS_PER_SPLIT = 2
"""Two-shot splits (:meth:`GemmAllReduce.schedule`) of about this many row blocks, at most
:data:`fluxlite.schedule.MAX_SPLITS` / 2: a smaller last split leaves less of the gather after the
GEMM, more splits cost more producer steps (copies and flags, 1-3 per peer each)."""


TAPER_MIN_TILES = 120
"""The matmul consumer's two shots taper their splits (:data:`fluxlite.schedule.TAPER`) where the
last split's GEMM has at least this many 128x256 output tiles, about one wave on a 132-SM GPU
(:meth:`GemmAllReduce.tapers`). Below that, calls ran 0.97-1.03x their time with two even splits,
and cuBLAS's picks at the tapered row counts were now and then far slower (one call 1.17x); above
it 0.93-1.007x (two H200s, BENCHMARKS.md). The same on every rank: it depends only on the call's
shapes."""


def _gathered_offset(world_size: int, chunk_rows: int, N: int, element_size: int) -> int:
    """Where ``gathered`` (the peers' reduced chunks) sits in a data half: after ``recv``, aligned as a
    workspace view."""
    return view_offset(world_size * chunk_rows * N * element_size)


class GemmAllReduce(GemmReduceScatter):
    """One shot for small calls; else GEMM-RS's first shot (its schedule, slots, kernel and producer
    steps), then a gather."""

    name = "gemm_ar"
    code = 3
    rows_divisible = False  # any M: the chunks have ceil(M / W) rows, the last ones padded

    def out_shape(self, args: Args) -> tuple[int, int]:
        return args.a.shape[0], args.weight.shape[0]

    # ---- the references ----------------------------------------------------------------------------
    def sequential(self, args: Args) -> torch.Tensor:
        """The GEMM, the all-reduce, then the epilogue once: cuBLAS
        (:func:`~fluxlite._sequential.linear_into`) then NCCL's ``all_reduce``, into ``out`` where
        given and nothing follows them."""
        a, out = args.a, args.out
        into_out = args.ep == PLAIN and out is not None
        partial = linear_into(out if into_out else None, a, args.weight, None)
        if args.tp.world_size > 1:
            dist.all_reduce(partial, group=args.tp.group)
        return self._finish(partial, args)

    def decomposed(self, args: Args) -> torch.Tensor:
        """Row chunks: each chunk's all-reduce is in flight while the next chunk's GEMM computes."""
        a, weight = args.a, args.weight
        M = a.shape[0]
        chunk = -(-M // max(2, args.tp.world_size))
        partial = a.new_empty((M, weight.shape[0]))
        works = []
        for lo in range(0, M, chunk):
            linear_into(partial[lo : lo + chunk], a[lo : lo + chunk], weight, None)
            works.append(dist.all_reduce(partial[lo : lo + chunk], group=args.tp.group, async_op=True))
        for work in works:
            work.wait()
        return self._finish(partial, args)

    def _finish(self, reduced: torch.Tensor, args: Args) -> torch.Tensor:
        """The epilogue once, on the reduced ``[M, N]`` product (in ``a.dtype``): a bias at most is
        added in place, as GEMM-RS's reference does; a scale or an activation is applied in fp32."""
        if args.ep != PLAIN:
            y = apply_epilogue(reduced, args.ep, args.bias, None, args.a.dtype)
            return y if args.out is None else args.out.copy_(y)
        y = reduced if args.out is None or reduced is args.out else args.out.copy_(reduced)
        if args.bias is not None:
            y += args.bias
        return y

    # ---- the tile protocol: one shot for small calls; else GEMM-RS's on chunks of ceil(M / W) rows, then the gather
    def chunk_rows(self, rows: int, world_size: int) -> int:
        return -(-rows // world_size)

    def tile_order(self, sched: sch.TileSchedule, num_n: int, group_m: int, programs: int) -> torch.Tensor:
        """Always split by split: the second shot's copies leave as the reduced splits are counted, and
        groups across splits would finish every split of the local chunk at its end, leaving the whole
        gather after the GEMM."""
        return sched.tile_order(num_n, group_m, by_split=True)

    def schedule(self, world_size: int, rank: int, rows: int, block_m: int, splits: int | None = None,
                 variant: str = "") -> sch.TileSchedule:
        """GEMM-RS's schedule, with splits of :data:`ROW_BLOCKS_PER_SPLIT` row blocks by default;
        tapered splits in a ``"tapered"`` plan (:meth:`plan_variant`)."""
        if variant == TAPERED:
            return sch.build(world_size, rank, self.chunk_rows(rows, world_size), block_m, self.first, tapered=True)
        if splits is None and world_size > 1:
            blocks = -(-self.chunk_rows(rows, world_size) // block_m)
            splits = min(sch.MAX_SPLITS // 2, max(1, blocks // ROW_BLOCKS_PER_SPLIT))
        return super().schedule(world_size, rank, rows, block_m, splits)

    def one_shot(self, world_size: int, M: int, N: int, element_size: int) -> bool:
        """Whether a fused call of ``M`` rows and ``N`` columns reduces in one shot (:data:`ONE_SHOT_MAX_BYTES`)."""
        return (world_size - 1) * M * N * element_size <= ONE_SHOT_MAX_BYTES

    def one_shot_rows(self, M: int, world_size: int, rank: int) -> tuple[int, int]:
        """Every rank reduces every row."""
        return 0, M

    def plan_variant(self, world_size: int, args: Args, consumer: str) -> str:
        """Each path has a plan of its own, whose views of the data halves are that path's; two shots
        by the matmul consumer (``"torch"``) with tapered splits (:meth:`tapers`) another."""
        if self.call_is_one_shot(world_size, args):
            return ONE_SHOT
        return TAPERED if consumer == "torch" and self.tapers(world_size, args.a.shape[0], args.weight.shape[0]) else ""

    def tapers(self, world_size: int, M: int, N: int) -> bool:
        """Whether the matmul consumer's two shots of ``M`` rows and ``N`` columns taper their splits:
        a chunk of at least ``sum(TAPER)`` row blocks whose last eighth has at least
        :data:`TAPER_MIN_TILES` tiles of 128x256."""
        chunk = self.chunk_rows(M, world_size)
        blocks = -(-chunk // CPU_BLOCK_M)
        if world_size == 1 or blocks < sum(sch.TAPER):
            return False
        last_rows = chunk - sch.split_span(len(sch.TAPER) - 1, blocks, len(sch.TAPER), tapered=True).start * CPU_BLOCK_M
        return -(-last_rows // 128) * -(-N // 256) >= TAPER_MIN_TILES

    def reserve_bytes(self, world_size: int, M: int, N: int, element_size: int) -> int:
        """One-shot: this rank's partial. Two-shot: ``recv`` for the chunks' partials, then
        ``gathered``, the peers' reduced chunks."""
        if self.one_shot(world_size, M, N, element_size):
            return M * N * element_size
        mc = self.chunk_rows(M, world_size)
        return _gathered_offset(world_size, mc, N, element_size) + world_size * mc * N * element_size

    def wide_output(self, args: Args, columns: int) -> torch.Tensor:
        """A call on whole output rows (:meth:`whole_output_rows`) still writes the caller's ``[M, N]``:
        its buffers are ``columns`` wide, and the end crops every chunk into ``out``
        (:meth:`second_shot_end`)."""
        return args.out if args.out is not None else args.a.new_empty(self.out_shape(args))

    def data_views(self, ws, parity: int, plan, args: Args) -> tuple[torch.Tensor, torch.Tensor]:
        """``recv``, and our own chunk's rows of ``gathered`` (``[<= mc, N]``), where the consumer
        writes our reduced chunk when ``out``'s rows are narrower than the call's (:meth:`reduced_rows`)."""
        W, r, mc = ws.world_size, ws.rank, plan.sched.chunk_rows
        N, dtype = args.weight.shape[0], args.a.dtype
        recv, _ = super().data_views(ws, parity, plan, args)
        gathered = ws.data(r, parity, (W, mc, N), dtype, _gathered_offset(W, mc, N, dtype.itemsize))
        return recv, gathered[r, : max(0, min(mc, args.a.shape[0] - r * mc))]

    def reduced_rows(self, out: torch.Tensor, own: torch.Tensor | None, rank: int, chunk_rows: int) -> torch.Tensor:
        """This rank's chunk of ``out``'s rows (fewer than ``chunk_rows`` for a last chunk cut short);
        ``own`` (our rows of ``gathered``) where ``out``'s rows are narrower than it (a call on whole
        output rows)."""
        if own is not None and own.shape[1] != out.shape[1]:
            return own
        start = min(rank * chunk_rows, out.shape[0])
        return out.narrow(0, start, min(chunk_rows, out.shape[0] - start))

    def second_shot(self, call: Call, out: torch.Tensor, reduced: torch.Tensor) -> list:
        """The gather's producer part (module docstring): each reduced split pushed from ``reduced`` to
        every peer once the consumer has counted it (the copy engine's copies, beside the GEMM but
        for the last), each followed by our ``reduced`` flag of that split on every peer. The copy
        out of the peers' rows: :meth:`second_shot_end`."""
        ws, plan, parity = call.ws, call.plan, call.parity
        W = ws.world_size
        g = _Gather.of(call, out, reduced)
        counters = call.state.counters.data_ptr()
        steps = []
        for s, (lo, hi) in enumerate(plan.split_rows):
            steps.append((WAIT, counters + 4 * sch.counter_slot(g.rank, s), plan.sched.split_tiles(s, plan.num_n),
                          dict(what="reduced tiles", peer=g.rank, chunk=g.rank, split=s)))
            hi = min(hi, g.rows_of(g.rank))  # a last chunk cut short: only its rows travel
            if hi > lo:
                steps += [(COPY, g.in_gathered(ws, p, parity, g.rank, lo), g.red + lo * g.row, (hi - lo) * g.row)
                          for p in g.peers]
            steps += [(SIGNAL, call.flag_addr(p, sch.reduced_slot(W, g.rank, s)), sch.SET) for p in g.peers]
        return steps

    def second_shot_end(self, call: Call, out: torch.Tensor, reduced: torch.Tensor) -> None:
        """The gather's end, behind the consumer: every peer's reduced splits copied from our
        ``gathered`` into their rows of ``out``, each once its ``reduced`` flag is set (bounded waits);
        where ``gathered``'s rows are wider than ``out``'s (a call on whole output rows), the first
        ``N`` columns of every chunk, ours too (from ``reduced``, in ``gathered``, first).

        On CUDA (and with the CPU's kernel consumer, interpreted) one kernel on the consumer's stream
        (:mod:`fluxlite.kernels.gather_end`), :data:`~fluxlite.kernels.gather_end.PROGRAMS_PER_SM`
        programs per SM. It starts a microsecond or two behind the
        last GEMM and, but where ranks share a GPU, does not wait for our producer
        (:meth:`fluxlite.fused.Call.run`): it copies the peers' earlier splits while the copy engines
        still push the last ones. On CPU otherwise,
        after the producer thread, the same waits and copies on this thread, one after another."""
        g = _Gather.of(call, out, reduced)
        state, plan, ws = call.state, call.plan, call.ws
        W, r, parity = ws.world_size, g.rank, call.parity
        if ws.is_cuda or plan.consumer == "triton":
            bounds = plan.kernels.get(_BOUNDS)
            if bounds is None:  # made with the plan's first call, which runs eagerly (fluxlite.fused.call.get_plan)
                rows = [lo for lo, _ in plan.split_rows] + [g.mc]
                bounds = plan.kernels[_BOUNDS] = torch.tensor(rows, dtype=torch.int32, device=out.device)
            gather_end.launch(out=out, data_bases=state.data_bases(parity), flag_bases=state.flag_bases(),
                              bounds=bounds, error=state.error, call=state.call_number, rank=r, world_size=W,
                              gathered=g.gathered // out.element_size(), chunk_rows=g.mc,
                              region=sch.region_start(W, parity), reduced_at=sch.reduced_slot(W, 0, 0),
                              timeout_s=call.timeout_s,
                              sms=gemm_core.persistent_programs(plan.config, out.device),
                              cache=plan.kernels, pitch=reduced.shape[1])
            return
        cropped = reduced.shape[1] != out.shape[1]
        for s, (lo, hi) in enumerate(plan.split_rows):
            if cropped:
                g.copy_out(out, ws, parity, r, lo, hi)
            for p in g.peers:
                host_wait(call.flag_addr(r, sch.reduced_slot(W, p, s)), sch.SET, what=REDUCED_ROWS, peer=p, chunk=p,
                          split=s, **call.wait_info())
                g.copy_out(out, ws, parity, p, lo, hi)


_BOUNDS = "gather_bounds"  # the plan's cache entry (Plan.kernels) of the end's split boundaries on the device


class _Gather(NamedTuple):
    """Where the second shot's rows lie, for rank ``rank`` of a call: chunks of ``mc`` rows of
    ``row`` bytes in ``gathered`` (the call's columns), ``M`` rows in all; ``red``: the address of our
    reduced chunk; ``gathered``: bytes from a data half's start to its ``gathered``."""

    rank: int
    peers: tuple[int, ...]
    M: int
    mc: int
    row: int
    red: int
    gathered: int

    @classmethod
    def of(cls, call: Call, out: torch.Tensor, reduced: torch.Tensor) -> "_Gather":
        W, r = call.ws.world_size, call.ws.rank
        mc = call.plan.sched.chunk_rows
        N, e = reduced.shape[1], out.element_size()
        return cls(r, call.plan.sched.peers(), out.shape[0], mc, N * e, reduced.data_ptr(),
                   _gathered_offset(W, mc, N, e))

    def rows_of(self, chunk: int) -> int:
        """Rows of ``chunk`` (fewer for a last chunk cut short, none past ``M``)."""
        return max(0, min(self.mc, self.M - chunk * self.mc))

    def in_gathered(self, ws, owner: int, parity: int, chunk: int, row: int = 0) -> int:
        """The address of row ``row`` of ``chunk``'s rows in rank ``owner``'s ``gathered`` (data half
        ``parity``)."""
        return ws.data_addr(owner, parity) + self.gathered + (chunk * self.mc + row) * self.row

    def copy_out(self, out: torch.Tensor, ws, parity: int, chunk: int, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` of ``chunk`` (those it has) from our ``gathered`` into ``out``, their first
        ``N`` columns where ``gathered``'s rows are wider (on CPU)."""
        hi = min(hi, self.rows_of(chunk))
        if hi <= lo:
            return
        first = chunk * self.mc
        N, e = out.shape[1], out.element_size()
        if self.row == N * e:
            ctypes.memmove(out.data_ptr() + (first + lo) * self.row, self.in_gathered(ws, ws.rank, parity, chunk, lo),
                           (hi - lo) * self.row)
            return
        wide = ws.data(ws.rank, parity, (ws.world_size * self.mc, self.row // e), out.dtype, self.gathered)
        out[first + lo : first + hi].copy_(wide[first + lo : first + hi, :N])


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
