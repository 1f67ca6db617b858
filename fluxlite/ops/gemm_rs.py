"""GEMM-ReduceScatter: ``scale * reduce_scatter(a @ weight.T) + bias``, the whole op in one object.

``a: [M, K_local]`` on each of ``W`` ranks, ``weight: [N, K_local]`` -> this rank's ``[M/W, N]`` rows
of the sum over ranks; the scale and the bias apply once, after the reduction.

The tile protocol (rank ``r``, a call of parity ``P``, ``mc = M / W`` rows per chunk; ``recv: [W, mc,
N]`` is symmetric, data half ``P``; flags are those of region ``P``, set to 1 and cleared by their
owner)::

    align:    every peer d: d.signature[P][r] <- ours; d.ready[r] = 1       (fluxlite.kernels.align)
    consumer: blocks of peer chunk d: partial[d] tile = A @ W.T; counter (d, s) += 1
              blocks of our chunk: for every peer p: wait ready[p], check its signature, wait (p, s);
                                   out = scale * (A @ W.T + sum_p recv[p]) + b      (fp32, fixed peer order)
    producer: for d in r+1, r+2, ...: for s: wait counter (d, s) == tiles of (d, s)
                                             d.recv[r] <- partial[d] rows of s; d.flag (r, s) = 1

The consumer is one of two (:meth:`fluxlite.ops.op.Op.consumer_of`): the Triton kernel above, tile
by tile, or the matmul consumer, the same protocol a split at a time with cuBLAS on CUDA::

    consumer: splits of peer chunk d: partial[d] rows = scale * A @ W.T (+ b for chunk r - 1); count (d, s)
                                      (on CUDA an event behind the GEMM, which the producer's wait waits for)
              splits of our chunk: wait (bounded kernel) as above; out rows = addmm(C = recv[p0], A, W.T) + other peers'

A small call (:meth:`GemmReduceScatter.one_shot`: at most :data:`ONE_SHOT_MAX_BYTES` read from the
peers) has neither consumer nor producer: cuBLAS computes the whole partial ``[M, N]`` into the
workspace, then one kernel (:mod:`fluxlite.kernels.one_shot`) waits for every peer's partial and
sums this rank's rows of all of them (:meth:`GemmReduceScatter._one_shot`), GEMM-AllReduce's one
shot on a chunk of the rows.

The producer only ever waits on this rank's own counters, which the consumer always completes (a
kernel whose own wait timed out still computes and counts every peer tile). The schedule starts on
the next rank's chunk and ends on the local one (``first = 1``), so each destination's partials
leave as early as possible and the tiles that wait come last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.distributed as dist

from .. import _cublaslt as cublaslt
from .. import epilogue
from .. import schedule as sch
from .._decomposed import exchange, wait_all
from .._sequential import (ROW_UNIT_BYTES, first_columns, linear_into, pays_to_pad, reduce_scatter_rows,
                           zero_padded)
from .._validate import check_rows_divisible
from ..epilogue import apply as apply_epilogue
from ..host_flags import host_set_flag, host_store
from ..fused import Call, FusedState, Plan, get_plan, producer
from ..fused.producer import COPY, SIGNAL, WAIT
from ..kernels import gemm_rs as kernel
from ..kernels import one_shot
from ..kernels.gemm_core import GemmConfig
from .op import Args, Op, check_common, finish_args, tma_k_padding


ONE_SHOT_MAX_BYTES = 8 << 20
"""The most bytes a rank may read from its peers in a one-shot GEMM-RS call, ``(W - 1) * M / W * N *
element_size`` (:meth:`GemmReduceScatter.one_shot`); a larger call overlaps its partials' copies
with its GEMM. On two H200s at TP=2 (one run, throughput mode, against the overlapped protocol;
BENCHMARKS.md, "Small calls") the one shot took 0.44-0.92x the device time at eight shapes of 128
KiB to 8 MiB read a rank, and 1.11-1.26x at four of 16-64 MiB, where the overlapped protocol
hides its copies behind a GEMM of 0.4 ms and more. On four H200s at TP=4 (one run): 0.30-0.84x at six
shapes of 192 KiB to 7.5 MiB read, 0.91-1.02x at two of 12 MiB and 1.05-1.44x at four of 24-96
MiB. Read at every call; a repeated call keeps its first call's plan, and so its path."""

ONE_SHOT = "one_shot"  # the plan variant of a one-shot call (GemmReduceScatter.one_shot)


MATMUL_SPLITS = 2
"""Splits per chunk of the matmul consumer (at most; fewer where a chunk has fewer row blocks): each
split is one GEMM per chunk, a copy and a flag per peer, and on the local chunk a bounded wait. Two let
the first split's copy run beside the second split's GEMM, so the local chunk's first ``addmm`` finds
its partials there; three were slower on every GEMM-RS and GEMM-AllReduce shape measured at two ranks
on two H200s (BENCHMARKS.md, "GEMM-RS by cuBLAS and the copy engine")."""


class GemmReduceScatter(Op):
    name = "gemm_rs"
    code = 2
    first = 1
    a_layout, weight_layout = "[M, K_local]", "[N, K_local]"
    rows_divisible: ClassVar[bool] = True  # M must divide by the group size (each rank gets M/W rows)
    rule_min_flops_beyond_two: ClassVar[float] = 3e11
    """Where ``auto`` measures nothing (``dispatch.rule``), the fused path from this many GEMM FLOPs per
    rank at more than two ranks. There each rank sends ``W - 1`` of its ``W`` partial chunks by the
    copy engine, which the GEMM of the other chunks hides only where ``K_local`` is large: at four
    ranks on four H200s (three presets at 8192 tokens) fused took 1.01-1.05x sequential's time in
    throughput mode at GEMM-RS of 0.7-1.0e11 FLOPs and 1.17-1.59x at GEMM-AllReduce of 0.7-2.4e11,
    and won in both modes at every shape from 3.4e11 (BENCHMARKS.md). GEMM-AllReduce takes it too."""

    # ---- the call ----------------------------------------------------------------------------------
    def check(self, a, weight, bias, *, group, impl, timeout, out, scale=None) -> Args:
        tp = check_common(self, a, weight, bias, group, impl, timeout)
        ep = epilogue.check(self.name, activation=None, row_scale=None, scale=scale, rows=a.shape[0],
                            weight_rows=weight.shape[0], like=a)
        if self.rows_divisible:
            check_rows_divisible(self.name, a.shape[0], tp.world_size)
        return finish_args(self, tp, a, weight, bias, out, ep, timeout, dict(scale=scale))

    def out_shape(self, args: Args) -> tuple[int, int]:
        return args.a.shape[0] // args.tp.world_size, args.weight.shape[0]

    def dispatch_rows(self, a: torch.Tensor, world_size: int, options: dict) -> int:
        return a.shape[0]

    # ---- the references ----------------------------------------------------------------------------
    def sequential(self, args: Args) -> torch.Tensor:
        """The GEMM, the reduce-scatter, then the epilogue once."""
        a, bias, ep, out = args.a, args.bias, args.ep, args.out
        plain = ep == epilogue.PLAIN
        partial = linear_into(None, a, args.weight, None)
        reduced = reduce_scatter_rows(partial, args.tp, out if plain else None)  # into out if nothing follows
        if not plain:
            reduced = apply_epilogue(reduced, ep, bias, None, a.dtype)
            bias = None
        if out is None:
            out = reduced
        elif reduced is not out:
            out.copy_(reduced)
        if bias is not None:
            out += bias
        return out

    def decomposed(self, args: Args) -> torch.Tensor:
        """The partial of chunk ``r + 1`` is computed first and sent while the partial of ``r + 2`` is
        computed, and so on; the local partial last. The received partials are summed in fp32 (fp64
        stays fp64), in a fixed order, and the epilogue is applied once."""
        tp, a, weight = args.tp, args.a, args.weight
        W, r = tp.world_size, tp.rank
        mc = a.shape[0] // W
        N = weight.shape[0]
        partials = a.new_empty((W, mc, N))  # [d]: our partial of rank d's rows; [r] stays here
        received = a.new_empty((W, mc, N))  # [p]: rank p's partial of our rows
        steps = []
        for i in range(1, W):
            dst, src = (r + i) % W, (r - i) % W
            linear_into(partials[dst], a[dst * mc : (dst + 1) * mc], weight, None)
            steps.append(exchange(tp, [(partials[dst], dst)], [(received[src], src)]))
        acc = linear_into(None, a[r * mc : (r + 1) * mc], weight, None)
        acc = acc.to(torch.promote_types(a.dtype, torch.float32))
        for works in steps:
            wait_all(works)
        for p in range(W):  # a fixed order on every rank
            if p != r:
                acc += received[p]
        reduced = apply_epilogue(acc, args.ep, args.bias, None, a.dtype)
        return reduced if args.out is None else args.out.copy_(reduced)

    def kernel_configs(self, args: Args) -> tuple[GemmConfig | None, ...]:
        """One shot: none (cuBLAS computes the partial). Else the matmul consumer (``None``), then
        the configs whose pipeline the GEMM-RS kernel can hold (``kernel.MAX_STAGES``); ``args``
        ``None``: those of any call."""
        if args is not None and self.call_is_one_shot(args.tp.world_size, args):
            return ()
        return tuple(c for c in super().kernel_configs(args) if c is None or c.num_stages <= kernel.MAX_STAGES)

    def kernel_operands(self, state: FusedState, args: Args) -> Args:
        """One shot: as given (cuBLAS computes the partial, at any ``K``); else with whole output rows
        (:meth:`whole_output_rows`), then the Triton kernel's (:meth:`Op.kernel_operands`)."""
        if self.call_is_one_shot(state.ws.world_size, args):
            return args
        return super().kernel_operands(state, self.whole_output_rows(state, args))

    def pads_output_rows(self, state: FusedState) -> bool:
        """Whether :meth:`whole_output_rows` may pad a call on ``state``'s device: CUDA, where cuBLAS
        and the kernel's TMA stores need whole rows."""
        return state.ws.is_cuda

    def output_columns(self, M: int, K: int, N: int, element_size: int) -> int:
        """The columns a fused call of ``[M, K]`` by ``[N, K]`` computes where :meth:`pads_output_rows`
        holds: ``N``, or where the output's rows are off 16 bytes (``N`` off a multiple of 8 in bf16)
        and the GEMM is large enough to pay for the padding
        (:func:`fluxlite._sequential.pays_to_pad`), ``N`` rounded up to whole rows."""
        unit = ROW_UNIT_BYTES // element_size
        if not N % unit or not pays_to_pad(M, K, N, element_size):
            return N
        return N + -N % unit

    def whole_output_rows(self, state: FusedState, args: Args) -> Args:
        """The call on :meth:`output_columns`: where those are more than ``N``, the weight (and the
        bias) zero-padded to them, into :meth:`wide_output` (GEMM-RS's ``[M/W, Np]``, whose first
        ``N`` columns :meth:`result` copies out; GEMM-AllReduce's the caller's ``[M, N]``, into
        which its end crops). The partials and the reduction then run on whole rows, by TMA and
        vector loads: on two H200s
        GEMM-RS's fused call on rows off 16 bytes took 1.4-2.6x the GEMM's limit, and padded
        1.09-1.15x with ``K`` whole, 0.69-0.77x the time of the call on rows as given;
        GEMM-AllReduce's padded took 0.57-0.68x its time on rows as given at seven shapes of
        2009-14174 rows (1.01x at a GEMM of 0.09 ms), where that had been slower than sequential.
        Where ``K``'s rows are off too (:func:`~fluxlite.ops.op.tma_k_padding`), ``a`` is padded
        here and the weight's one copy pads ``N`` and ``K`` at once (GEMM-RS 1.14-1.51x the limit).
        The padding costs a copy of the weight and one of the output (GEMM-RS's by
        :mod:`fluxlite.kernels.repitch` after the call, GEMM-AllReduce's within its last kernel),
        which small calls do not recoup. (AG-GEMM's output is every rank's rows, which its GEMM
        writes without a reduction: there the copy back cost more than the whole rows saved,
        BENCHMARKS.md.)"""
        a, weight = args.a, args.weight
        N = weight.shape[0]
        pad = self.output_columns(a.shape[0], a.shape[1], N, a.element_size()) - N
        if not pad or not self.pads_output_rows(state):
            return args
        bias = None if args.bias is None else torch.nn.functional.pad(args.bias, (0, pad))
        out = self.wide_output(args, N + pad)
        pad_k = tma_k_padding(state, a)  # K's padding for the kernels too, in the same copy of the weight
        if pad_k:
            a = zero_padded(a, 0, pad_k)
        return dataclasses.replace(args, a=a, weight=zero_padded(weight, pad, pad_k), bias=bias, out=out)

    def wide_output(self, args: Args, columns: int) -> torch.Tensor:
        """The output of a call on whole output rows (:meth:`whole_output_rows`): ``[M/W, columns]``,
        whose first ``N`` columns :meth:`result` copies out."""
        return args.a.new_empty((self.out_shape(args)[0], columns))

    def result(self, value: torch.Tensor, args: Args) -> torch.Tensor:
        """``value``, or where it has padded rows (:meth:`whole_output_rows`) its first ``N`` columns,
        in ``args.out`` where given."""
        N = args.weight.shape[0]
        return value if value.shape[1] == N else first_columns(value, N, args.out)

    # ---- the one-shot path -------------------------------------------------------------------------
    def one_shot(self, world_size: int, M: int, N: int, element_size: int) -> bool:
        """Whether a fused call of ``M`` rows and ``N`` columns reduces in one shot: its reads from the
        peers at most :data:`ONE_SHOT_MAX_BYTES`, and its rows whole 16-byte words of a partial (the
        reduction's vector loads). Shapes only: every rank decides alike."""
        rows = M // world_size
        return (world_size - 1) * rows * N * element_size <= ONE_SHOT_MAX_BYTES and rows * N * element_size % 16 == 0

    def call_is_one_shot(self, world_size: int, args: Args) -> bool:
        """:meth:`one_shot` for a call's arguments on ``world_size`` ranks."""
        return self.one_shot(world_size, args.a.shape[0], args.weight.shape[0], args.a.element_size())

    def one_shot_rows(self, M: int, world_size: int, rank: int) -> tuple[int, int]:
        """``(first row, rows)`` of the partials that ``rank`` reduces in a one-shot call: its chunk."""
        mc = M // world_size
        return rank * mc, mc

    def _one_shot(self, state: FusedState, plan: Plan, args: Args) -> torch.Tensor:
        """The one-shot call: cuBLAS's GEMM of the whole partial into our data half, then one
        reduction of our rows (:meth:`one_shot_rows`) of every rank's partial, read where it lies; no
        producer and no copy::

            align:  every peer d: d.signature[P][r] <- ours; d.ready[r] = 1
            GEMM:   partial = a @ weight.T, into our data half P     (cuBLAS on CUDA: fluxlite._sequential.linear_into)
            reduce: every peer d: d.finished[r] = 1; wait for every peer's ready, signature and finished
                    (bounded); out = scale * sum_q partial_q[our rows] + b, q in rank order
                    (one kernel on CUDA, fluxlite.kernels.one_shot; the /dev/shm mappings on CPU)

        A rank's partial is written again two calls later, once every peer has finished this call,
        so no barrier ends it."""
        ws, a, weight, bias, ep = state.ws, args.a, args.weight, args.bias, args.ep
        W, r = ws.world_size, ws.rank
        M, N = a.shape[0], weight.shape[0]
        row0, rows = self.one_shot_rows(M, W, r)
        chunk = -1 if rows == M else r  # what a timeout names
        state.check()
        call = Call(state, self.name, plan, args.timeout_s)
        parity = call.parity
        partial = call.views(lambda: ws.data(r, parity, (M, N), a.dtype))  # what the peers read
        out = args.out if args.out is not None else a.new_empty((rows, N))

        def consume_torch() -> None:
            linear_into(partial, a, weight, None)
            for p in range(W):  # after the partial: x86 keeps the order of these stores (fluxlite.host_flags)
                if p != r:
                    host_store(call.flag_addr(p, sch.finished_slot(W, r)), sch.SET)
            for p in range(W):
                if p != r:
                    call.wait_peer(sch.finished_slot(W, p), peer=p, chunk=chunk, split=0, what="partials")
            mine = slice(row0, row0 + rows)
            acc = ws.data(0, parity, (M, N), a.dtype)[mine].to(torch.promote_types(a.dtype, torch.float32), copy=True)
            for q in range(1, W):  # rank order on every rank: every rank's sum is the same
                acc += ws.data(q, parity, (M, N), a.dtype)[mine]
            out.copy_(apply_epilogue(acc, ep, bias, None, a.dtype))

        def consume_triton() -> None:
            linear_into(partial, a, weight, None)
            one_shot.launch(partials=state.data_bases(parity), out=out, bias=bias, flag_bases=state.flag_bases(),
                            flags=state.region(parity), sig=plan.signature_dev, counters=state.counters,
                            error=state.error, call=state.call_number, rank=r, world_size=W,
                            sig_base=call.signature_base, parity=parity, timeout_s=args.timeout_s, ep=ep,
                            config=plan.config, cache=plan.kernels, row0=row0, chunk=chunk)

        call.run(lambda: call.program((), list), consume_triton if plan.consumer == "triton" else consume_torch,
                 call.replay_key(a, weight, out, bias, scale=ep.scale))
        return out

    # ---- the tile protocol -------------------------------------------------------------------------
    def chunk_rows(self, rows: int, world_size: int) -> int:
        return rows // world_size  # the signature counts M, all rows

    def tile_order(self, sched: sch.TileSchedule, num_n: int, group_m: int, programs: int) -> torch.Tensor:
        """A split's partials leave once its tiles are done, but the peer chunks' copies have the whole
        local chunk's time to land: groups bounded by splits only where that costs the weight no reuse
        (:meth:`fluxlite.schedule.TileSchedule.split_groups_keep_reuse`)."""
        return sched.tile_order(num_n, group_m, sched.split_groups_keep_reuse(num_n, group_m, programs))

    def block_slot(self, world_size: int, rank: int, chunk: int, split: int, variant: str) -> int:
        """A peer chunk's block counts into its (chunk, split) counter; a local block waits for the
        data flag of ``(peer 0, split)`` (peer ``p``'s is ``p * peer_slots()`` further)."""
        return sch.data_slot(world_size, 0, split) if chunk == rank else sch.counter_slot(chunk, split)

    def prepare(self, state: FusedState, args: Args, config: GemmConfig | None) -> Plan:
        consumer = self.consumer_of(state, args, config)
        if consumer == "triton":
            kernel.check_config(config)
        state.check()
        M, K = args.a.shape
        N = args.weight.shape[0]
        plan = get_plan(state, self, M, K, N, args.a.dtype, self.plan_variant(state.ws.world_size, args, consumer),
                        args.ep, config, consumer, MATMUL_SPLITS if consumer == "torch" else None)
        state.reserve(self.reserve_bytes(state.ws.world_size, M, N, args.a.element_size()), timeout_s=args.timeout_s,
                      signature=plan.signature)
        return plan

    def has_matmul_consumer(self, args: Args) -> bool:
        """:meth:`_consume_by_matmul`, but for a one-shot call (cuBLAS's GEMM, then the reduction
        kernel); ``args`` ``None``: any call."""
        return args is None or not self.call_is_one_shot(args.tp.world_size, args)

    def plan_variant(self, world_size: int, args: Args, consumer: str) -> str:
        """What of a call's shapes (computed by ``consumer``) makes a plan of its own: the one-shot
        path (:meth:`one_shot`), whose views of the data halves are its own."""
        return ONE_SHOT if self.call_is_one_shot(world_size, args) else ""

    def reserve_bytes(self, world_size: int, M: int, N: int, element_size: int) -> int:
        """The bytes of a data half a call uses: ``recv``, the peers' partials of our rows."""
        return M * N * element_size

    def fused(self, state: FusedState, plan: Plan, args: Args) -> torch.Tensor:
        """The output by ``plan``: the producer program beside the consumer (one GEMM per split,
        :meth:`_consume_by_matmul`, or the Triton kernel: :meth:`consumer_of`). The consumer writes
        this rank's reduced chunk into ``out`` (GEMM-RS), or where :meth:`reduced_rows` says, from
        where a second shot takes it.
        A call small enough (:meth:`one_shot`) reduces in one shot instead (:meth:`_one_shot`): its
        plan says so (a repeated call keeps its first call's plan, and so its path)."""
        if plan.variant == ONE_SHOT:
            return self._one_shot(state, plan, args)
        ws, a, weight, bias, ep = state.ws, args.a, args.weight, args.bias, args.ep
        W, r = ws.world_size, ws.rank
        N = weight.shape[0]
        sched = plan.sched
        mc = sched.chunk_rows
        state.check()
        call = Call(state, self.name, plan, args.timeout_s)
        recv, own = call.views(lambda: self.data_views(ws, call.parity, plan, args))  # recv[p]: p's partial of our rows
        partial = state.scratch((W, mc, N), a.dtype)  # our partials of the peers' rows, before they leave
        out = args.out if args.out is not None else a.new_empty(self.out_shape(args))
        reduced = self.reduced_rows(out, own, r, mc)  # where the consumer writes our reduced chunk
        second = reduced is not out  # a second shot sends it on from there

        def consume_matmul() -> None:
            self._consume_by_matmul(call, args, partial, recv, reduced, second)

        def consume_triton() -> None:
            kernel.launch(a=a, weight=weight, out=reduced, bias=bias, partial=partial, recv=recv,
                          peer_tiles=plan.tiles.shape[0] - sched.local_tiles(plan.num_n), counters=state.counters,
                          rank=r, ep=ep, reduced_counters=sch.counter_slot(r, 0) if second else -1,
                          **call.kernel_args())

        copied = (partial.data_ptr(), reduced.data_ptr()) if second else (partial.data_ptr(),)

        def program() -> producer.Program:
            return call.program(copied, lambda: self.steps(call, partial) + (self.second_shot(call, out, reduced)
                                                                            if second else []))

        call.run(program, consume_triton if plan.consumer == "triton" else consume_matmul,
                 call.replay_key(a, partial, weight, out, bias, scale=ep.scale), copied,
                 (lambda: self.second_shot_end(call, out, reduced)) if second else None)
        return out

    def _consume_by_matmul(self, call: Call, args: Args, partial: torch.Tensor, recv: torch.Tensor,
                           reduced: torch.Tensor, second: bool) -> None:
        """The matmul consumer: :meth:`matmul_gemms`, with the protocol's counts and waits. On CUDA a
        count is an event (:class:`fluxlite.fused.producer.Feed`) and a wait a one-program kernel
        (:mod:`fluxlite.kernels.split_wait`); on CPU, host stores and host waits."""
        state, ws, plan = call.state, call.ws, call.plan
        W, r = ws.world_size, ws.rank
        peers = plan.sched.peers()

        def count(chunk: int, split: int) -> None:  # the producer waits for the split's blocks in the counter
            slot = sch.counter_slot(chunk, split)
            if ws.is_cuda:  # the counter's event, the producer's wait for it, and the copy behind it
                call.feed.counted(state.counters.data_ptr() + 4 * slot, split)
            else:
                host_set_flag(state.counters, slot, plan.sched.split_tiles(split, plan.num_n))

        def wait(split: int) -> None:  # the peers' partials of our chunk's split
            if ws.is_cuda:
                call.wait_split(split)  # behind our own signals of this split (producer.Feed)
            else:
                for p in peers:
                    call.wait_peer(sch.data_slot(W, p, split), peer=p, chunk=r, split=split, what="partials")

        self.matmul_gemms(args, plan, partial, recv, reduced, count, wait, second)

    def matmul_gemms(self, args: Args, plan: Plan, partial: torch.Tensor, recv: torch.Tensor, reduced: torch.Tensor,
                     count: Callable[[int, int], None], wait: Callable[[int], None], second: bool = False) -> None:
        """The matmul consumer's GEMMs: one per (chunk, split) in the schedule's order, the peers'
        chunks first. A peer chunk's split goes into ``partial[chunk]`` (``[W, mc, N]``), then
        ``count(chunk, split)``; a split of our chunk first ``wait(split)``, then takes the first
        peer's ``recv`` rows as the GEMM's ``C`` input (``addmm``: the reduction rides on the GEMM's
        epilogue, no pass of its own), adds any others, and writes ``reduced`` (``[<= mc, N]``); with
        a ``second`` shot it is counted too. The partial this rank computes for chunk ``r - 1``
        carries the bias, so that it is added once per chunk, and every partial the scale. On CUDA
        the GEMMs are cuBLASLt's without a workspace, with the 128x256 tile where the heuristic ranks
        it second behind 256x128 (``rows_256``, :mod:`fluxlite._cublaslt`); on CPU matmuls.
        ``scripts/bench_overlap.py`` times them with no count and no wait."""
        sched = plan.sched
        W, rank = sched.world_size, sched.rank
        a, bias, scale = args.a, args.bias, args.ep.scale
        M, mc = a.shape[0], sched.chunk_rows
        wt = args.weight.t()
        carried = (rank - 1) % W  # the chunk whose partial from this rank carries the bias
        peers = sched.peers()

        def product(dst: torch.Tensor, src: torch.Tensor, with_bias: bool) -> None:  # dst = scale * src @ W.T (+ b)
            cublaslt.linear_into(dst, src, args.weight, bias if with_bias else None, scale, rows_256=True)

        for chunk in sched.chunk_order:
            for split, (lo, hi) in enumerate(plan.split_rows):
                rows = max(0, min(hi, M - chunk * mc) - lo)  # a last chunk cut short (GEMM-AllReduce) has fewer
                src = a[chunk * mc + lo : chunk * mc + lo + rows]
                if chunk != rank:
                    if rows:
                        product(partial[chunk, lo : lo + rows], src, chunk == carried)
                    count(chunk, split)
                    continue
                wait(split)
                if rows:
                    dst = reduced[lo : lo + rows]
                    if peers:
                        first = recv[peers[0], lo : lo + rows]  # C: cuBLASLt reads it where it lies
                        if not cublaslt.addmm_into(dst, first, src, args.weight, scale, rows_256=True):  # not on CPU
                            torch.addmm(first, src, wt, alpha=scale, out=dst)  # copies C into dst first
                        for p in peers[1:]:
                            dst += recv[p, lo : lo + rows]
                    else:
                        product(dst, src, True)
                if second:  # the second shot sends each reduced split on once it is complete
                    count(rank, split)

    def data_views(self, ws, parity: int, plan: Plan, args: Args) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The views of our data half ``parity`` that a call by ``plan`` uses (made once per plan and
        data half, :meth:`fluxlite.fused.Call.views`): ``recv: [W, mc, N]``, and where an op with a
        second shot may write its reduced chunk, or ``None``."""
        W, mc = ws.world_size, plan.sched.chunk_rows
        return ws.data(ws.rank, parity, (W, mc, args.weight.shape[0]), args.a.dtype), None

    def reduced_rows(self, out: torch.Tensor, own: torch.Tensor | None, rank: int, chunk_rows: int) -> torch.Tensor:
        """Where the consumer writes this rank's reduced chunk: ``out`` itself, or (an op with a second
        shot) the rows of ``out`` that the chunk fills, ``[<= chunk_rows, N]``, or ``own`` (from
        :meth:`data_views`)."""
        return out

    def second_shot(self, call: Call, out: torch.Tensor, reduced: torch.Tensor) -> list:
        """Producer steps after the reduce-scatter (:meth:`reduced_rows` gave ``reduced``, not ``out``)."""
        raise NotImplementedError

    def second_shot_end(self, call: Call, out: torch.Tensor, reduced: torch.Tensor) -> None:
        """End a call with a second shot, behind the consumer and the producer (``Call.run``'s ``end``)."""
        raise NotImplementedError

    def steps(self, call: Call, partial: torch.Tensor) -> list:
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


RS = GemmReduceScatter.define()


def gemm_rs(
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
    """Multiply ``a`` by ``weight.T``, reduce-scatter the rows across the group, then
    ``scale * reduced + bias`` (once, after the reduction).

    A collective: every rank of the group calls it in the same order with the same shapes. It
    computes under ``torch.no_grad()``; :mod:`fluxlite.library` has it as a differentiable op.

    Args:
        a: ``[M, K_local]``, this rank's slice of the reduction dim; ``M`` divisible by the group size.
        weight: ``[N, K_local]`` (``nn.Linear`` layout).
        bias: ``[N]`` or ``None``; added once, after the reduction.
        group, impl, timeout: as in :func:`fluxlite.ag_gemm`.
        out: optional ``[M/W, N]`` tensor to write the result into.
        scale: a scalar multiplier of the reduced product, or ``None`` (1).

    Returns:
        ``[M/W, N]`` in ``a.dtype``: rows ``[r*M/W, (r+1)*M/W)`` of the summed product.
    """
    return RS(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out, scale=scale)
