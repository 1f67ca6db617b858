"""AllGather-GEMM: ``epilogue(all_gather(a) @ weight.T)``, the whole op in one object.

``a: [m, K]`` on each of ``W`` ranks, ``weight: [N, K]`` -> ``[W*m, N]`` (rank-major rows) and, with
``return_gathered``, the gathered input ``[W*m, K]``. The epilogue is :mod:`fluxlite.epilogue`'s
(row scale, scale, bias, activation; SwiGLU reads a ``[2N, K]`` weight).

The tile protocol (rank ``r``, a call of parity ``P``: data half and flag region ``P``). Flags are
set (``= 1``) and cleared by their owner at the start of the next call (:mod:`fluxlite.kernels.align`).
The consumer reads its own rows in place from ``a`` and each peer's from ``gathered`` once that
peer's (chunk, split) flag is set::

    push (the caller does not keep the gathered input; ``gathered`` is our symmetric buffer):
      align:    every peer p: p.signature[P][r] <- ours; p.ready[r] = 1
      producer: for p in r-1, r-2, ...: p.gathered[r] <- a, split by split, p.pushed (r, s) = 1
    pull (``gathered`` is a fresh tensor that the caller keeps, e.g. for a backward):
      align:    every peer p: p.signature[P][r] <- ours
      stage:    staging[r] <- a         (on the caller's stream, before the consumer: see below)
      producer: every peer p: p.ready[r] = 1                            # our rows may now be pulled
                for p in r+1, r+2, ...: wait ready[p] >= 1
                                        gathered[p] <- p.staging, split by split, pulled (p, s) = 1
                gathered[r] <- a                                        # for the caller; nothing waits on it
    consumer: for each row block (schedule order): a peer's block waits for the peer's ready flag,
              checks its signature, waits for the (chunk, split) flag; out = epilogue(A @ W.T)

The consumer is one of two (:meth:`fluxlite.ops.op.Op.consumer_of`): the Triton kernel above, tile by
tile, or the matmul consumer, the same protocol a chunk (split) at a time with cuBLAS on CUDA, for
pushed rows with no row scale (an activation is a pass after each GEMM)::

    consumer: out[our rows] = act(scale * a @ W.T + b)                (no wait: read in place)
              for each peer chunk p, split s: wait (bounded kernel) as above; out[p's rows of s] = ...

A small call (:meth:`AllGatherGemm.pushes_by_sm`: pushed rows of at most :data:`SM_PUSH_MAX_BYTES` a
rank, no row scale, a whole GEMM of fewer than :data:`SM_PUSH_MAX_TILES` output tiles, or chunks so
short that GEMMs cut by chunk would each read the whole weight, :func:`cut_rereads_weight`) has no
producer: the SMs push its chunk, ahead of the consumer on the caller's stream, and without a named
kernel config one GEMM takes every row once all have landed::

    gather:   one kernel (fluxlite.kernels.push_rows): align as above, beside the push:
              every peer p: p.gathered[r] <- a; then p.pushed (r, s) = 1 for every split s
              (our own gathered[r] <- a too); then wait (bounded) for every peer's every split
    consumer: out = act(scale * gathered @ W.T + b)

A replayed call's graph is then kernels only, which launch in a fraction of a copy node's time, and
the GEMM reads the weight once, not once per chunk: with under a wave of tiles the Triton kernel's
tiles run their whole ``K`` loops on a few SMs, up to several times cuBLAS's time.

With a row scale (the deferred norm's 1/sigma) each rank's ``[m]`` fp32 scales travel with its rows:
pushed into the peers' scale area before the first split's flag, or staged beside the staged rows
and pulled before the first split. The schedule starts on the local chunk (``first = 0``), which
needs no wait.

The staging copy is the one copy a peer waits on that stays within one GPU, and such a copy may run
on the SMs. Queued beside the consumer, it could wait for SMs that the consumer holds while the
consumer waits for the peer, whose consumer waits for these rows: so it runs before the consumer
(:data:`fluxlite.fused.producer.STAGE`), and costs the copy's time before the GEMM starts.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch
import torch.distributed as dist

from .. import _cublaslt as cublaslt
from .. import epilogue
from .. import schedule as sch
from .._decomposed import exchange, wait_all
from .._sequential import all_gather_rows, epilogue_linear
from ..fused import Call, FusedState, Plan, get_plan, producer, state_of
from ..fused.producer import COPY, SIGNAL, STAGE, WAIT
from ..kernels import ag_gemm as kernel
from ..kernels import gemm_core, push_rows
from ..kernels.device_flags import ERR_TIMEOUT_AG
from ..kernels.gemm_core import GemmConfig
from ..group import TPGroup
from ..host_flags import host_store
from ..workspace import get_workspace, lasting, view_offset
from .op import Args, Op, check_common, finish_args

SM_PUSH_MAX_BYTES = 8 << 20
"""A pushed call whose rows (``m * K`` elements a rank) take at most this many bytes (8 MiB) in whole
16-byte words, with no row scale, and whose whole GEMM has fewer than :data:`SM_PUSH_MAX_TILES`
output tiles or chunks whose cut GEMMs would reread the weight (:func:`cut_rereads_weight`), pushes
them by the SMs ahead of its consumer (:mod:`fluxlite.kernels.push_rows`), with no producer, and
without a named kernel config computes them in one cuBLAS GEMM (:meth:`AllGatherGemm.small_call`,
:meth:`AllGatherGemm.one_matmul`). Read at every call."""

SM_PUSH_MAX_TILES = 120
""":data:`SM_PUSH_MAX_BYTES`' second bound: output tiles of 128x256 of the gathered GEMM (``W * m``
rows), about one wave on a 132-SM GPU. Below it the overlapped Triton kernel's few tiles run their
whole ``K`` loops on a few SMs. On two H200s at TP=2 (one run, throughput mode, against the copy
engine's push and the overlapped consumer; BENCHMARKS.md, "Small calls"): 0.38-0.93x the device time
at eight shapes of 10-112 tiles and 256 KiB to 8 MiB a rank, 1.07x at 128 tiles (512x4096->4096),
1.08-1.31x at 256 and 448; with ``K`` off a multiple of 64 (the matmul consumer's) 1.10x at 40 tiles
and 0.87x at 264. On four H200s at TP=4 (one run): 0.43-0.81x at four shapes of 10-80 tiles, 1.02x
at 128 and 1.16-1.62x at seven of 160-896."""

WEIGHT_BOUND_ROWS = 320
"""Gathered rows below which a GEMM costs about one read of its weight whatever its rows
(:func:`cut_rereads_weight`): it does ``2 * rows`` FLOPs per weight element of 2 bytes, and a bf16
GEMM on an H100 or H200 does some 200-300 FLOPs in the time one byte comes from memory. 320 is
where the measurements cross (below)."""

MEMORY_OVER_LINK = 12
"""About how many times faster a GPU reads its own memory than the rows it gathers arrive from its
peers: 4.8 TB/s against 0.3-0.4 TB/s on an H200 (the copy engine over NVLink), 3.35 against the
same on an H100 (:func:`cut_rereads_weight`)."""


def cut_rereads_weight(world_size: int, m: int, out_features: int) -> bool:
    """Whether the overlapped paths, which read the weight once per chunk of ``m`` rows (the matmul
    consumer's GEMMs) or per block of rows (the Triton kernel's tiles), would spend more on those
    reads than on the gather they hide, so that one GEMM over every gathered row after the gather is
    the faster.

    A GEMM of ``rows`` costs about ``max(1, rows / R)`` reads of its weight (``R`` =
    :data:`WEIGHT_BOUND_ROWS`; a read takes ``N * K * 2 / memory`` seconds), so ``W`` GEMMs of ``m``
    rows cost ``W - max(1, W * m / R)`` reads more than one; they hide at most the gather,
    ``(W - 1) * m * K * 2 / link`` seconds. ``K`` and the element size cancel::

        cut_rereads_weight  <=>  (W - max(1, W * m / R)) * N  >  MEMORY_OVER_LINK * (W - 1) * m

    Decode and short prefill steps meet it at wide layers. On two H200s (TP=2, forced fused; one
    GEMM after the SMs' push over the copy engine's push and the overlapped consumer,
    BENCHMARKS.md, "One GEMM where cut GEMMs would reread the weight"): 0.60-0.88x the device time at
    seven shapes of 80-200 rows a rank and 14336-64128 columns, 0.87x at 256x8192->28672, 0.98x at
    240x4096->7680 and 1.04x (0.96x one call at a time) at 256x4096->14336; the overlapped path had
    taken 1.03-1.67x sequential's time there. At four ranks the push lost at 256-384 rows a rank and
    3456-7168 columns (1.02-1.19x; "Small calls at four ranks"), which the rule leaves overlapped.

    ``out_features`` is the GEMM's output columns; SwiGLU's weight has twice as many rows, so there
    the rule counts half the weight it rereads and errs toward the overlapped path."""
    if world_size < 2:
        return False
    extra_reads = world_size - max(1.0, world_size * m / WEIGHT_BOUND_ROWS)
    return extra_reads * out_features > MEMORY_OVER_LINK * (world_size - 1) * m


PULL = "gathered"  # the variant whose gathered input the caller keeps: pulled into a fresh tensor
GATHER = "gather"  # the push transport with no GEMM (AllGatherGemm.gather)
SM_PUSH = "sm_push"  # the plan variant of a call whose rows the SMs push (AllGatherGemm.pushes_by_sm)

def cuda_splits(consumer: str, rows: int, n_out: int, config: GemmConfig, gated: bool, device: torch.device) -> int:
    """Splits per peer chunk on CUDA (at most; a chunk of fewer row blocks gets one per block): one for
    the matmul consumer, and for the Triton kernel where a chunk's ``rows x n_out`` tiles fit in one
    wave of its programs; else two.

    A split costs a copy-engine copy and a flag, each starting some microseconds after the step
    before it, and a wait; it pays only where the consumer has this rank's own tiles to run while a
    peer's first split arrives. Where our chunk is one wave, every program finishes its local tile at
    once and then waits on the peer's rows whatever the split, so more splits only add their starts.
    On two H200s (TP=2, in one process or one machine, alternating; BENCHMARKS.md, "AG-GEMM: one split
    per chunk of one wave, two otherwise"): one split took 0.82-0.94x the device time of three or four
    splits at the four shapes whose chunk was 0.4-0.85 of a wave; at 1.1-1.2 waves two splits ran as
    four did, and one up to 5% slower. Each split also puts two copy nodes in a replayed call's graph
    (about 2.5 us of launch each). For the matmul consumer a second split would also cost a GEMM's
    last wave."""
    if consumer != "triton":
        return 1
    tiles = -(-rows // config.block_m) * gemm_core.column_blocks(n_out, config, gated)
    return 1 if tiles <= gemm_core.persistent_programs(config, device) else 2


def _scales_offset(rows: int, row_bytes: int) -> int:
    """Where the row scales sit in a data half: after ``rows`` rows, aligned as a workspace view."""
    return view_offset(rows * row_bytes)


class AllGatherGemm(Op):
    name = "ag_gemm"
    code = 1
    option_bits = ("return_gathered", "row_scale")
    first = 0
    a_layout, weight_layout = "[m, K]", "[N_local, K]"
    tensor_options = ("row_scale",)

    # ---- the call ----------------------------------------------------------------------------------
    def check(self, a, weight, bias, *, group, impl, timeout, out, return_gathered=False, activation=None,
              row_scale=None, scale=None) -> Args:
        tp = check_common(self, a, weight, bias, group, impl, timeout)
        ep = epilogue.check(self.name, activation=activation, row_scale=row_scale, scale=scale, rows=a.shape[0],
                            weight_rows=weight.shape[0], like=a)
        options = dict(return_gathered=bool(return_gathered), activation=activation, scale=scale,
                       row_scale=None if row_scale is None else row_scale.contiguous())
        return finish_args(self, tp, a, weight, bias, out, ep, timeout, options)

    def out_shape(self, args: Args) -> tuple[int, int]:
        return args.tp.world_size * args.a.shape[0], args.ep.out_features(args.weight.shape[0])

    def dispatch_rows(self, a: torch.Tensor, world_size: int, options: dict) -> int:
        return world_size * a.shape[0]

    def variant(self, options: dict) -> str:
        return PULL if options.get("return_gathered") else ""

    def result(self, value, args: Args):
        out, gathered = value
        if not args.options["return_gathered"]:
            return out
        K = args.a.shape[1]
        if gathered.shape[1] != K:  # rows zero-padded for the kernel (Op.kernel_operands): the caller's K,
            gathered = gathered[:, :K].contiguous()  # contiguous as every other impl's (and the fake's)
        return out, gathered

    # ---- the references ----------------------------------------------------------------------------
    def sequential(self, args: Args):
        """``(ep(all_gather(a) @ weight.T), all_gather(a))``; row scales gathered with the rows."""
        row_scale = args.options["row_scale"]
        gathered = all_gather_rows(args.a, args.tp)
        scales = None if row_scale is None else all_gather_rows(row_scale, args.tp)
        return epilogue_linear(args.out, gathered, args.weight, args.bias, args.ep, scales), gathered

    def decomposed(self, args: Args):
        """The gather in ``W - 1`` point-to-point steps, all issued at once; the local rows' GEMM runs
        first, then chunk ``r + 1``, ``r + 2``, ... as each step's rows arrive."""
        tp, a, weight, bias, ep = args.tp, args.a, args.weight, args.bias, args.ep
        row_scale = args.options["row_scale"]
        W, r = tp.world_size, tp.rank
        m = a.shape[0]
        gathered = a.new_empty((W * m, a.shape[1]))
        scales = None if row_scale is None else row_scale.new_empty(W * m)
        out = a.new_empty(self.out_shape(args)) if args.out is None else args.out
        steps = []
        for i in range(1, W):
            src = (r + i) % W
            sends, recvs = [(a, (r - i) % W)], [(gathered[src * m : (src + 1) * m], src)]
            if row_scale is not None:
                sends.append((row_scale, (r - i) % W))
                recvs.append((scales[src * m : (src + 1) * m], src))
            steps.append(exchange(tp, sends, recvs))
        local = slice(r * m, (r + 1) * m)
        epilogue_linear(out[local], a, weight, bias, ep, row_scale)  # overlaps every step
        gathered[local].copy_(a)
        if scales is not None:
            scales[local].copy_(row_scale)
        for i, works in enumerate(steps, start=1):
            wait_all(works)
            rows = slice((r + i) % W * m, ((r + i) % W + 1) * m)
            epilogue_linear(out[rows], gathered[rows], weight, bias, ep, None if scales is None else scales[rows])
        return out, gathered

    # ---- the tile protocol -------------------------------------------------------------------------
    def chunk_rows(self, rows: int, world_size: int) -> int:
        return rows  # the signature counts m, a rank's rows

    def block_slot(self, world_size: int, rank: int, chunk: int, split: int, variant: str) -> int:
        """The local chunk is read in place (no wait); a peer's block waits for its rows: pushed into
        our buffer, or pulled by our producer."""
        if chunk == rank:
            return -1
        return (sch.pulled_slot if variant == PULL else sch.data_slot)(world_size, chunk, split)

    def signature_options(self, variant: str, ep: epilogue.Epilogue) -> tuple[bool, ...]:
        return variant == PULL, ep.row_scaled

    def ready_on_arrival(self, variant: str) -> bool:
        return variant != PULL  # pulled rows: the producer announces them once they are staged

    def has_matmul_consumer(self, args: Args) -> bool:
        """Pushed rows with no row scale: the matmul consumer, :meth:`_consume_by_matmul` (the scale
        and the bias in cuBLAS's epilogue, an activation in one elementwise pass after each GEMM)."""
        return not args.options["return_gathered"] and not args.ep.row_scaled

    def pushes_by_sm(self, world_size: int, args: Args) -> bool:
        """Whether a call pushes its rows by the SMs, ahead of its consumer and with no producer
        (:mod:`fluxlite.kernels.push_rows`; on CPU the host's copies, in the same place): pushed rows
        (no ``return_gathered``) with no row scale of a :meth:`small_call`. Shapes only, so every
        rank of a call decides alike.

        A copy-engine copy into a peer makes the graph of a replayed call cost about 28 us to launch
        on two H200s, whatever its size, and takes some microseconds to start; so few rows leave the
        consumer little of its own to overlap with them."""
        a = args.a
        return (not args.options["return_gathered"] and not args.ep.row_scaled
                and self.small_call(world_size, a.shape[0], a.shape[1], args.ep.out_features(args.weight.shape[0]),
                                    a.element_size()))

    @staticmethod
    def small_call(world_size: int, m: int, K: int, out_features: int, element_size: int) -> bool:
        """Whether rows ``[m, K]`` a rank, gathered from ``world_size`` ranks into a GEMM of
        ``out_features`` output columns, are a small call: two or more ranks, at most
        :data:`SM_PUSH_MAX_BYTES` a rank in whole 16-byte words, and fewer than
        :data:`SM_PUSH_MAX_TILES` output tiles or chunks whose cut GEMMs would each read the whole
        weight for less than the gather they hide (:func:`cut_rereads_weight`)."""
        nbytes = m * K * element_size
        tiles = -(-world_size * m // 128) * -(-out_features // 256)
        return (world_size > 1 and 0 < nbytes <= SM_PUSH_MAX_BYTES and nbytes % 16 == 0
                and (tiles < SM_PUSH_MAX_TILES or cut_rereads_weight(world_size, m, out_features)))

    def one_matmul(self, world_size: int, args: Args) -> bool:
        """A call whose rows the SMs push (:meth:`pushes_by_sm`) takes the matmul consumer without a
        named kernel config (:meth:`Op.consumer_of`): one cuBLAS GEMM over every gathered row once
        all have landed (:meth:`_push_by_sm` waits for them). So few rows make the Triton kernel's few tiles
        run their whole ``K`` loops on a few SMs: on two H200s its GEMM took 80 us at
        16x8192->2560 where cuBLAS's took 11, and 44 against 13 us at 128x4096->4096
        (BENCHMARKS.md); one GEMM also reads the weight once, not once per chunk
        (:func:`cut_rereads_weight`)."""
        return self.pushes_by_sm(world_size, args)

    def prepare(self, state: FusedState, args: Args, config: GemmConfig | None) -> Plan:
        state.check()  # a poisoned workspace raises before it could enter a collective growth
        a, ep = args.a, args.ep
        m, K = a.shape
        variant = SM_PUSH if self.pushes_by_sm(state.ws.world_size, args) else self.variant(args.options)
        consumer = self.consumer_of(state, args, config)
        N = args.weight.shape[0]
        splits = None  # CPU: the schedule's default, so that the tests run up to four splits per chunk
        if state.ws.is_cuda:
            splits = cuda_splits(consumer, m, ep.out_features(N), config or gemm_core.default_config(), ep.gated,
                                 a.device)
        plan = get_plan(state, self, m, K, N, a.dtype, variant, ep, config, consumer, splits)
        rows_here = state.ws.world_size * m if variant != PULL else m
        row = K * a.element_size()
        state.reserve(_scales_offset(rows_here, row) + (4 * rows_here if ep.row_scaled else 0),
                      timeout_s=args.timeout_s, signature=plan.signature)
        return plan

    def fused(self, state: FusedState, plan: Plan, args: Args):
        """``(out [W*m, N], gathered [W*m, K] or None)`` by ``plan``: the producer program beside the
        consumer (the GPU kernel, or per-block matmuls on CPU); where the plan says so
        (:data:`SM_PUSH`), the SMs' push ahead of the consumer instead (a repeated call keeps its
        first call's plan, and so its path)."""
        ws, a, weight, bias, ep = state.ws, args.a, args.weight, args.bias, args.ep
        row_scale = args.options["row_scale"]  # contiguous (check, as_used)
        W, r = ws.world_size, ws.rank
        m, K = a.shape
        state.check()
        push = plan.variant != PULL
        row = K * a.element_size()
        call = Call(state, self.name, plan, args.timeout_s)
        sched = plan.sched
        if push:  # the peers push into our data half
            gathered, scale_gathered = call.views(lambda: (
                ws.data(r, call.parity, (W * m, K), a.dtype),
                ws.data(r, call.parity, (W * m,), torch.float32, offset=_scales_offset(W * m, row)) if ep.row_scaled
                else None))
        else:  # pulled into tensors that the caller keeps
            gathered = a.new_empty((W * m, K))
            scale_gathered = row_scale.new_empty(W * m) if ep.row_scaled else None
        out = args.out if args.out is not None else a.new_empty((W * m, ep.out_features(weight.shape[0])))

        def consume_torch() -> None:
            self._consume_by_matmul(call, args, gathered, scale_gathered, out)

        def consume_triton() -> None:
            kernel.launch(a_local=a, gathered=gathered, weight=weight, out=out, bias=bias, ep=ep,
                          scale_local=row_scale, scale_gathered=scale_gathered,
                          local_tiles=sched.local_tiles(plan.num_n), **call.kernel_args())

        consume = consume_triton if plan.consumer == "triton" else consume_torch
        key = call.replay_key(a, gathered, row_scale, scale_gathered, weight, out, bias, scale=ep.scale)
        if plan.variant == SM_PUSH:
            whole = plan.consumer != "triton"  # the matmul consumer: one GEMM over every row, ours too

            def push_then_consume() -> None:
                self._push_by_sm(call, a, to_self=whole, wait=whole)
                if whole:
                    self._product(args, out, gathered, None)  # every rank's rows, which the push waited for
                else:
                    consume()

            # No producer, no copy (a program of no steps: no side stream to fork and join); the
            # push starts the call
            call.run(lambda: call.program((), list), push_then_consume, key, consume_aligns=True)
            return out, None
        # The producer's own tensors (not the workspace's, whose buffers change only with its
        # generation, which drops every program and graph): what its program and a replay's check
        # depend on.
        own = (a, row_scale) if push else (a, gathered, row_scale, scale_gathered)
        copied = tuple(t.data_ptr() for t in own if t is not None)

        def program() -> producer.Program:
            return call.program(copied, lambda: self.steps(call, a, gathered, push, row_scale, scale_gathered))

        call.run(program, consume, key, copied)
        return out, (None if push else gathered)

    def _push_by_sm(self, call: Call, a: torch.Tensor, to_self: bool, wait: bool) -> None:
        """Start the call, push our rows into every peer's data half (``to_self``: into ours too),
        set our data flags of every split on every peer, and with ``wait`` wait for every peer's
        (:meth:`pushes_by_sm`): on CUDA one kernel on the current stream, ahead of the consumer
        (:mod:`fluxlite.kernels.push_rows`); on CPU the host's alignment, copies, stores and waits, in
        the same order."""
        state, ws, parity = call.state, call.ws, call.parity
        W, r = ws.world_size, ws.rank
        nbytes = a.numel() * a.element_size()
        if ws.is_cuda and a.data_ptr() % 16:  # the kernel moves 16-byte words; a view's rows may start anywhere
            a = a.clone()
        offset = r * nbytes  # rank-major rows of m * K elements each
        splits = call.plan.sched.splits
        if ws.is_cuda:
            push_rows.launch(src=a.data_ptr(), nbytes=nbytes, data_bases=state.data_bases(parity),
                             count=state.push_count, dst_offset=offset, first_slot=sch.data_slot(W, r, 0),
                             splits=splits, wait=wait, sig_base=call.signature_base,
                             sms=gemm_core.sm_count(a.device), alignment=call.align_args(), cache=state.push_kernels,
                             to_self=to_self)
            return
        call.align()
        peers = [p for p in range(W) if p != r]
        for p in peers + [r] * to_self:
            ctypes.memmove(ws.data_addr(p, parity) + offset, a.data_ptr(), nbytes)
        for p in peers:  # after every copy: x86 keeps the order of these stores (fluxlite.host_flags)
            for s in range(splits):
                host_store(call.flag_addr(p, sch.data_slot(W, r, s)), sch.SET)
        for split in range(splits) if wait else ():
            for p in peers:
                call.wait_peer(sch.data_slot(W, p, split), peer=p, chunk=p, split=split, what="gathered rows")

    def gather(self, a: torch.Tensor, tp: TPGroup, timeout_s: float,
               arrived: Callable[[slice, torch.Tensor], None] | None = None) -> torch.Tensor:
        """``all_gather(a)``, ``[m, K]`` on each rank -> ``[W*m, K]`` rank-major, by this op's push
        transport with no GEMM of its own: the peers' producers copy their rows into our data half
        (copy engines, no SMs), ours copies our rows there too, and the matmul consumer's walk
        (:meth:`_by_split`) ends the call on the current stream once every peer's rows are in. It
        calls ``arrived(rows, src)`` as rows become readable: ``rows`` a slice of the gathered rows,
        ``src: [len(rows), K]`` their tensor (first this rank's own, ``a``, while the peers' travel;
        then each peer's split), so work on the rows can hide their transfer.

        For a backward whose GEMMs would otherwise share the SMs with NCCL's all-gather kernel. The
        result is a view of the workspace, not a fresh tensor: the peers write into it again in the
        fused call after the next one on this group, which they may start once this rank has
        started the next one. So read it (in stream order) before the next fused call on the group
        is enqueued. A collective, like the op; its call signature is AG-GEMM's with ``N = 0``.
        With ``arrived`` the call is not replayed from a graph (what it enqueues is not known here)."""
        a = a.contiguous()
        with lasting():  # the state and the plan outlive the call
            state = state_of(get_workspace(tp.group, a.device, timeout=timeout_s), timeout_s)
            state.check()
            ws, (m, K) = state.ws, a.shape
            W, r, row = ws.world_size, ws.rank, K * a.element_size()
            plan = get_plan(state, self, m, K, 0, a.dtype, GATHER, consumer="torch", splits=1 if ws.is_cuda else None)
            state.reserve(_scales_offset(W * m, row), timeout_s=timeout_s, signature=plan.signature)
        call = Call(state, self.name, plan, timeout_s)
        gathered = call.views(lambda: ws.data(r, call.parity, (W * m, K), a.dtype))
        copied = (a.data_ptr(),)

        def steps() -> list:  # the push, then our own rows (nothing waits on them but the call's end)
            return self.steps(call, a, gathered, True, None, None) + [
                (COPY, gathered.data_ptr() + r * m * row, a.data_ptr(), m * row)]

        def each(rows: slice | None) -> None:
            if arrived is None:
                return
            if rows is None:  # our own rows, read in place while the peers' travel
                arrived(slice(r * m, (r + 1) * m), a)
            else:
                arrived(rows, gathered[rows])

        call.run(lambda: call.program(copied, steps), lambda: self._by_split(call, m, GATHER, each),
                 call.replay_key(a, gathered, scale=None) if arrived is None else None, copied)
        return gathered

    def _consume_by_matmul(self, call: Call, args: Args, gathered: torch.Tensor, scale_gathered: torch.Tensor | None,
                           out: torch.Tensor) -> None:
        """The matmul consumer (on CPU, the only one): this rank's rows in one GEMM, read in place from
        ``a`` while the peers' rows travel; then each peer's chunk split by split, once the split is in
        ``gathered`` (a bounded wait: on CUDA a one-program kernel between the GEMMs,
        :meth:`~fluxlite.fused.call.Call.wait_split`; on CPU the host's). On CUDA each GEMM is one
        cuBLAS call with the bias and the scale in its epilogue (:meth:`has_matmul_consumer`;
        :func:`fluxlite._cublaslt.linear_into`), then an activation's elementwise pass where there is
        one (:func:`fluxlite.epilogue.activate_into`)."""
        r, a, row_scale = call.ws.rank, args.a, args.options["row_scale"]
        m = a.shape[0]

        def arrived(rows: slice | None) -> None:
            if rows is None:
                self._product(args, out[r * m : (r + 1) * m], a, row_scale)
            else:
                self._product(args, out[rows], gathered[rows], None if scale_gathered is None else scale_gathered[rows])

        self._by_split(call, m, self.variant(args.options), arrived)

    @staticmethod
    def _product(args: Args, dst: torch.Tensor, src: torch.Tensor, scales: torch.Tensor | None) -> None:
        """``dst = epilogue(src @ weight.T)``, the matmul consumer's GEMM: one cuBLAS call with the
        scale and the bias in its epilogue, then an activation's pass in place (SwiGLU: from the
        ``[rows, 2N]`` pre-activation into ``dst``); with row scales (CPU only) torch's."""
        weight, bias, ep = args.weight, args.bias, args.ep
        if ep.row_scaled:  # CPU only (has_matmul_consumer)
            epilogue_linear(dst, src, weight, bias, ep, scales)
            return
        z = src.new_empty((src.shape[0], weight.shape[0])) if ep.gated else dst
        cublaslt.linear_into(z, src, weight, bias, ep.scale)
        epilogue.activate_into(dst if ep.gated else None, z, ep.activation)

    def _by_split(self, call: Call, m: int, variant: str, arrived) -> None:
        """The matmul consumer's walk: ``arrived(None)`` for this rank's chunk (no wait), then for each
        peer chunk, split by split, a bounded wait for the split's rows (on CUDA a one-program kernel
        on the current stream, :meth:`~fluxlite.fused.call.Call.wait_split`; on CPU the host's) and
        ``arrived(rows)`` with their ``slice`` of the gathered rows."""
        ws, plan = call.ws, call.plan
        W, r = ws.world_size, ws.rank
        for chunk in plan.sched.chunk_order:
            if chunk == r:
                arrived(None)
                continue
            for split, (lo, hi) in enumerate(plan.split_rows):
                if ws.is_cuda:
                    call.wait_split(split, peer=chunk, code=ERR_TIMEOUT_AG)
                else:
                    call.wait_peer(self.block_slot(W, r, chunk, split, variant), peer=chunk, chunk=chunk, split=split,
                                   what="gathered rows")
                arrived(slice(chunk * m + lo, chunk * m + hi))

    def steps(self, call: Call, a: torch.Tensor, gathered: torch.Tensor, push: bool, row_scale: torch.Tensor | None,
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
        # Staged for the peers to pull: a same-device copy, which must not wait for SMs that a
        # consumer holds while it waits on a peer (fluxlite.fused.producer, STAGE)
        steps = [(STAGE, ws.data_addr(r, parity), src, m * row)]
        if row_scale is not None:
            steps.append((STAGE, ws.data_addr(r, parity) + staged_scales, row_scale.data_ptr(), 4 * m))
        steps += [(SIGNAL, call.flag_addr(p, sch.ready_slot(r)), sch.SET) for p in plan.sched.peers()]
        for p in plan.sched.peers():
            steps.append((WAIT, call.flag_addr(r, sch.ready_slot(p)), sch.SET, dict(what="staged rows", peer=p, chunk=p)))
            staged = ws.data_addr(p, parity)
            if row_scale is not None:
                steps.append((COPY, scale_gathered.data_ptr() + 4 * p * m, staged + staged_scales, 4 * m))
            for s, (lo, hi) in enumerate(plan.split_rows):
                steps += [(COPY, dst + (p * m + lo) * row, staged + lo * row, (hi - lo) * row),
                          (SIGNAL, call.flag_addr(r, sch.pulled_slot(W, p, s)), sch.SET)]
        # Only for the caller, and last: nothing waits on it, so on SMs it may wait for the consumer
        steps.append((COPY, dst + r * m * row, src, m * row))
        return steps


AG = AllGatherGemm.define()


def ag_gemm(
    a: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    impl: str = "auto",
    return_gathered: bool = False,
    timeout: float | None = None,
    out: torch.Tensor | None = None,
    activation: str | None = None,
    row_scale: torch.Tensor | None = None,
    scale: float | None = None,
):
    """All-gather rows of ``a`` across the group, multiply by ``weight.T``, apply the epilogue:
    ``act(scale * row_scale[i] * (all_gather(a) @ weight.T)[i] + bias)`` (:mod:`fluxlite.epilogue`).

    A collective: every rank of the group calls it in the same order with the same shapes. It
    computes under ``torch.no_grad()``; :mod:`fluxlite.library` has it as a differentiable op.

    Args:
        a: ``[m, K]``, this rank's rows.
        weight: ``[N_local, K]`` (``nn.Linear`` layout), this rank's output columns; ``[2*N_local, K]``
            (gate rows, then up rows) for ``activation="swiglu"``.
        bias: ``[weight.shape[0]]`` or ``None``.
        group: the TP group (default: the default process group).
        impl: ``"sequential"`` (collective, then matmul), ``"decomposed"`` (per-peer chunks of the
            collective overlapped with chunked matmuls), ``"fused"`` (tile protocol) or ``"auto"``
            (measured per shape: :mod:`fluxlite.dispatch`).
        return_gathered: also return the gathered input ``[W*m, K]`` (rank-major rows).
        timeout: seconds any flag wait may take (default: ``FLUXLITE_TIMEOUT_S`` or 120).
        out: optional ``[W*m, N_local]`` tensor to write the result into.
        activation: ``None``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"`` or ``"swiglu"``.
        row_scale: ``[m]`` fp32 scales of this rank's rows (gathered with them), or ``None``.
        scale: a scalar multiplier of the product, or ``None`` (1).

    Returns:
        ``[W*m, N_local]`` in ``a.dtype``, or ``(out, gathered)`` when ``return_gathered``.
    """
    return AG(a, weight, bias, group=group, impl=impl, timeout=timeout, out=out, return_gathered=return_gathered,
              activation=activation, row_scale=row_scale, scale=scale)
