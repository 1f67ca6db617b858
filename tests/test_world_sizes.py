"""fluxlite at the world sizes people train with: 3, 4, 6 and 8 CPU ranks, not only 2.

1. **The ops on gloo ranks** (one spawn per world size, every case in it, every failing case
   reported at once): ``ag_gemm`` (push, and pull with ``return_gathered``) and ``gemm_rs`` under
   ``sequential``, ``decomposed`` and ``fused``, with a bias, plain and with an epilogue (AG: GELU
   after a per-row scale; RS: a scalar scale), on m = 1, one ragged block, a ragged last block, and
   a chunk of several splits; each call on fresh data against a float64 reference
   (tests/numerics.py: fp32, ``1e-5`` relative to ``|ref| + rms(ref)``). Fresh operands per call
   make a row left over from an earlier call wrong, and deterministic mode NaN-fills every fresh
   output. Then a Column SP -> GELU -> Row SP pair of the parallel layers, forward and backward,
   under every overlap mode, against a single-process float64 autograd reference. At W=3 the fused
   protocol also runs with the Triton kernel (interpreted) as the consumer.
2. **The producer programs' order and per-peer chunking**, pure Python for W = 2..8 and every rank:
   AG push goes to ``r-1, r-2, ...`` (peer ``p`` consumes our chunk ``(r - p) % W``-th, so every
   peer receives its next chunk first), AG pull and RS talk to ``r+1, r+2, ...``; each split's copy
   covers exactly the rows whose blocks wait on (or count into) the flag that follows it, on the
   right rank and slot. GEMM-AllReduce's gather announces its chunk to every peer, then waits for
   every peer's in one bounded step (no stream wait), then pulls each peer's chunk into its rows.
   tests/test_schedule.py checks the schedule's own chunk order and flag layout;
   tests/test_liveness.py the kernels' tile claiming. This file checks what neither does: the
   programs that :mod:`fluxlite.fused` builds from the schedule. Also: fluxlite-profile's world size
   comes from the GPUs or torchrun.
3. **GPU** (``gpu`` marker, for 4- and 8-GPU machines): the GPU tests' workers that work at any world
   size, on every GPU (:func:`tests.gpu_utils.gpu_world_size`) when there are more than 2.

Time on 2 shared cores, mostly spawning: 8-9 s at W=3 (with the kernel consumer) and W=4, 12 s at
W=6, 11-17 s at W=8 (30-50 s in all, by the machine's load); the pure-Python part about 1 s.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import fluxlite
from fluxlite import schedule as sch
from fluxlite.ops import AG, AR, RS
from fluxlite.ops.ag_gemm import PULL, _scales_offset
from fluxlite.ops.gemm_ar import _gathered_offset
from fluxlite.fused.call import CPU_BLOCK_M, Call, get_plan
from fluxlite import _cuda_driver as cu
from fluxlite.fused.producer import COPY, FLAGS, SIGNAL, STAGE, WAIT, Program, SignalCopy, first_wait, stream_calls

from .dist_utils import run_ranks
from .numerics import ag_reference, check, poison_empty_tensors, randn, rs_reference

F32 = torch.float32
IMPLS = ("sequential", "decomposed", "fused")
SEED = int(os.environ.get("FLUXLITE_TEST_SEED", "20261214"))
B = CPU_BLOCK_M
# (rows per rank, K, N): m = 1; one ragged block; a ragged last block; 9 blocks, so 2 splits per chunk.
SHAPES = [(1, 8, 5), (37, 24, 19), (2 * B + 3, 16, 12), (8 * B + 5, 9, 7)]
# The kernel consumer (interpreter blocks of 32 rows): 2 blocks, the last ragged; 9 blocks, 2 splits.
KERNEL_SHAPES = [(33, 40, 24), (8 * 32 + 5, 16, 8)]


# ---- 1. the ops and the layers on W gloo ranks --------------------------------------------------


def _ag_cases(rank, W, gen, shapes, impls, failures):
    for (m, K, N), impl, gathered, epilogue in itertools.product(shapes, impls, (False, True), (False, True)):
        a_full = randn(gen, W * m, K, dtype=F32)
        w = randn(gen, N, K, dtype=F32)
        bias = randn(gen, N, dtype=F32)
        scales = torch.rand(W * m, generator=gen) + 0.5
        rows = slice(rank * m, (rank + 1) * m)
        if epilogue:  # act(row_scale * acc + bias), in float64
            ref = F.gelu(scales.double()[:, None] * ag_reference(a_full, w, None) + bias.double())
            kw = dict(activation="gelu", row_scale=scales[rows])
        else:
            ref, kw = ag_reference(a_full, w, bias), {}
        name = f"ag_gemm W={W} r={rank} m={m} K={K} N={N} impl={impl} gathered={gathered} gelu+row_scale={epilogue}"
        res = fluxlite.ag_gemm(a_full[rows], w, bias, impl=impl, return_gathered=gathered, **kw)
        if gathered:
            res, g = res
            if not torch.equal(g, a_full):
                failures.append(f"{name}: the gathered input is not the rank-major concatenation")
        check(name, res, ref, F32, failures)


def _rs_cases(rank, W, gen, shapes, impls, failures, timeout=None):
    for (mc, K, N), impl, scale in itertools.product(shapes, impls, (None, 0.5)):
        a_parts = [randn(gen, W * mc, K, dtype=F32) for _ in range(W)]
        w_parts = [randn(gen, N, K, dtype=F32) for _ in range(W)]
        bias = randn(gen, N, dtype=F32)
        ref = rs_reference(a_parts, w_parts, None, rank) * (1.0 if scale is None else scale) + bias.double()
        name = f"gemm_rs W={W} r={rank} M={W * mc} K={K} N={N} impl={impl} scale={scale}"
        check(name, fluxlite.gemm_rs(a_parts[rank], w_parts[rank], bias, impl=impl, scale=scale, timeout=timeout), ref,
              F32, failures)


def _layer_pair(rank, W, gen, failures):
    """x [s/W, b, H] -> Column SP (H -> Fm) -> GELU -> Row SP (Fm -> H): output and every grad."""
    from fluxlite.parallel import (ColumnParallelLinear, ModelParallelConfig, RowParallelLinear,
                                   allreduce_sequence_parallel_grads, partition_index)

    s, b, H, Fm = 3 * W, 2, 8, 5 * W  # 6 rows per rank
    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=F32, use_cpu_initialization=True)
    idx = partition_index(Fm, W, rank)
    mine = slice(rank * s // W, (rank + 1) * s // W)
    for overlap in ("sequential", "decomposed", "fused"):
        X, G = randn(gen, s, b, H, dtype=F32), randn(gen, s, b, H, dtype=F32)
        W1, b1, W2, b2 = (randn(gen, *shape, dtype=F32) for shape in ((Fm, H), (Fm,), (H, Fm), (H,)))
        # The float64 reference: one process, the whole sequence and the whole weights.
        ref = [t.double().requires_grad_() for t in (X, W1, b1, W2, b2)]
        Z = F.gelu(ref[0] @ ref[1].t() + ref[2]) @ ref[3].t() + ref[4]
        (Z * G.double()).sum().backward()
        col = ColumnParallelLinear(H, Fm, config=cfg, init_method=torch.nn.init.zeros_, bias=True,
                                   gather_output=False, overlap=overlap)
        row = RowParallelLinear(Fm, H, config=cfg, init_method=torch.nn.init.zeros_, bias=True,
                                input_is_parallel=True, skip_bias_add=False, overlap=overlap)
        with torch.no_grad():
            col.weight.copy_(W1[idx])
            col.bias.copy_(b1[idx])
            row.weight.copy_(W2[:, idx])
            row.bias.copy_(b2)
        x = X[mine].clone().requires_grad_()
        z, z_bias = row(F.gelu(col(x)[0]))
        (z * G[mine]).sum().backward()
        allreduce_sequence_parallel_grads([col, row])  # the Row bias saw this rank's rows only
        name = f"layers W={W} r={rank} overlap={overlap}"
        if z_bias is not None:
            failures.append(f"{name}: the Row layer returned a bias it should have added")
        for what, got, want in (("output", z, Z[mine]), ("input grad", x.grad, ref[0].grad[mine]),
                                ("Column weight grad", col.weight.grad, ref[1].grad[idx]),
                                ("Column bias grad", col.bias.grad, ref[2].grad[idx]),
                                ("Row weight grad", row.weight.grad, ref[3].grad[:, idx]),
                                ("Row bias grad", row.bias.grad, ref[4].grad)):
            check(f"{name}: {what}", got, want.detach(), F32, failures)


def _count_launches() -> dict:
    """From now on, count this process's launches of each fused kernel (they still run)."""
    from fluxlite.kernels import ag_gemm as ag_kernel
    from fluxlite.kernels import gemm_rs as rs_kernel
    from fluxlite.kernels import one_shot as one_shot_kernel

    counts = dict(ag=0, rs=0, one_shot=0)
    for op, module in (("ag", ag_kernel), ("rs", rs_kernel), ("one_shot", one_shot_kernel)):
        def counted(*args, _launch=module.launch, _op=op, **kw):
            counts[_op] += 1
            return _launch(*args, **kw)
        module.launch = counted
    return counts


def _world(rank: int, W: int, kernel_consumer: bool) -> None:
    poison_empty_tensors()
    gen = torch.Generator().manual_seed(SEED + W)  # the same global operands on every rank
    failures: list[str] = []
    _ag_cases(rank, W, gen, SHAPES, IMPLS, failures)
    _rs_cases(rank, W, gen, SHAPES, IMPLS, failures)
    _layer_pair(rank, W, gen, failures)
    if kernel_consumer:  # read when a workspace's fused state is made: every rank builds a fresh one
        os.environ["FLUXLITE_CPU_CONSUMER"] = "triton"
        dist.barrier()  # no rank is still inside a call on the old workspace
        fluxlite.release_workspaces()
        launches = _count_launches()
        _ag_cases(rank, W, gen, KERNEL_SHAPES, ("fused",), failures)
        _rs_cases(rank, W, gen, KERNEL_SHAPES, ("fused",), failures)  # GEMM-RS's one shot (small calls)
        rs_module = importlib.import_module("fluxlite.ops.gemm_rs")
        bound, rs_module.ONE_SHOT_MAX_BYTES = rs_module.ONE_SHOT_MAX_BYTES, 0
        # and its overlapped protocol (a timeout of its own: a repeated call would keep its first call's path)
        _rs_cases(rank, W, gen, KERNEL_SHAPES, ("fused",), failures, timeout=31)
        rs_module.ONE_SHOT_MAX_BYTES = bound
        # Per shape: AG push and pull, each plain and with GELU; RS plain and scaled, on each path.
        n = len(KERNEL_SHAPES)
        expected = dict(ag=4 * n, rs=2 * n, one_shot=2 * n)
        if launches != expected:
            failures.append(f"kernel launches {launches}, expected {expected}: the kernel was not the consumer")
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [3, 4, 6, 8])
def test_ops_and_layers_at_world_size(world_size):
    """Every impl of both ops and the layer pair at W ranks; the kernel as the CPU consumer at W=3."""
    run_ranks(_world, world_size, world_size == 3, timeout_s=60)


# ---- 2. the producer programs: order and per-peer chunking, W = 2..8 -----------------------------

_SPACE = 1 << 48  # above every user-space pointer: the fake addresses never meet a real tensor's


class _AddressMap:
    """What the producer programs read from a workspace and the fused state on it, for rank ``rank``
    of ``world_size``, with no memory behind it: rank ``p``'s data half ``parity`` starts at
    ``(1 + 2p + parity) << 48`` and its flag slot ``s`` sits at ``((1 + 2W + p) << 48) + 4s``, so every
    address says whose, what and where. The tile counters are a real (local) tensor."""

    is_cuda = False
    device = torch.device("cpu")

    def __init__(self, world_size: int, rank: int) -> None:
        self.world_size, self.rank = world_size, rank
        self.ws = self  # the fused state's workspace: the same map
        self.consumer = os.environ.get("FLUXLITE_CPU_CONSUMER", "torch")  # as fluxlite.fused.state_of reads it
        self.plans, self.plan_builds = {}, 0
        self.counters = torch.zeros(sch.num_counters(world_size), dtype=torch.int32)

    def data_addr(self, p: int, parity: int) -> int:
        return (1 + 2 * p + parity) * _SPACE

    def flag_addr(self, p: int, slot: int) -> int:
        return (1 + 2 * self.world_size + p) * _SPACE + 4 * slot

    def where(self, addr: int):
        """``("data", rank, parity, offset)``, ``("flag", rank, slot)``, or ``("local", addr)``."""
        unit, offset = divmod(addr, _SPACE)
        if unit == 0:
            return ("local", addr)
        if unit <= 2 * self.world_size:
            return ("data", (unit - 1) // 2, (unit - 1) % 2, offset)
        return ("flag", unit - 1 - 2 * self.world_size, offset // 4)


def _program(op: str, W: int, r: int, rows: int, K: int, N: int, *, push: bool = True, row_scale: bool = False,
             epoch: int = 5):
    """``(ws, plan, call, steps, tensors)``: the producer program of rank ``r``'s call ``epoch``."""
    ws = _AddressMap(W, r)
    op_, variant = {"ag": AG, "rs": RS, "ar": AR}[op], PULL if op == "ag" and not push else ""
    plan = get_plan(ws, op_, rows, K, N, F32, variant)
    call = Call.__new__(Call)  # the call's state without taking an epoch from a workspace
    call.ws = call.state = ws
    call.plan, call.epoch, call.parity = plan, epoch, epoch % 2
    if op == "ag":
        a, gathered = torch.empty(rows, K), torch.empty(W * rows, K)
        scales = torch.empty(rows) if row_scale else None
        scales_gathered = torch.empty(W * rows) if row_scale else None
        steps = AG.steps(call, a, gathered, push, scales, scales_gathered)
        return ws, plan, call, steps, dict(a=a, gathered=gathered, scales=scales, scales_gathered=scales_gathered)
    if op == "ar":
        out = torch.empty(rows, N)
        reduced = AR.reduced_rows(out, None, r, plan.sched.chunk_rows)
        return ws, plan, call, AR.second_shot(call, out, reduced), dict(out=out)
    partial = torch.empty(W, rows // W, N)
    return ws, plan, call, RS.steps(call, partial), dict(partial=partial)


def _flag(ws, e, rank: int, slot: int) -> int:
    """The address of ``rank``'s flag ``slot`` (a region offset) of call ``e``'s parity region."""
    return ws.flag_addr(rank, sch.region_start(ws.world_size, e % 2) + slot)


def _announces(steps, ws, e) -> set[str]:
    """What of the call's arrival ``steps`` send to a peer: ``"signature"`` (a copy into a peer's
    signature slots) and ``"ready"`` (a peer's ready flag for this rank). The alignment step sends
    both (:mod:`fluxlite.kernels.align`); only AG's pull producer sets ``ready``, once it has staged."""
    W, r = ws.world_size, ws.rank
    sigs = {ws.flag_addr(p, sch.signature_slot(W, parity, r)) for p in range(W) for parity in (0, 1)}
    readies = {(SIGNAL, _flag(ws, e, p, sch.ready_slot(r)), sch.SET) for p in range(W) if p != r}
    return ({"signature"} if any(s[0] == COPY and s[1] in sigs for s in steps) else set()) | (
        {"ready"} if any(s in readies for s in steps if s[0] == SIGNAL) else set())


def _check_split_pairs(ws, steps, e, i, flag_rank, slot_of_split, dst_base, src_base, row, rows_of_split, splits):
    """From step ``i``: per split, one copy of its rows then its flag. Returns the index after them."""
    for s in range(splits):
        lo, hi = rows_of_split(s)
        assert steps[i] == (COPY, dst_base + lo * row, src_base + lo * row, (hi - lo) * row), (s, steps[i])
        assert steps[i + 1] == (SIGNAL, _flag(ws, e, flag_rank, slot_of_split(s)), sch.SET), (s, steps[i + 1])
        i += 2
    return i


CONSUMERS = ["torch", "triton"]  # the CPU block size (64 rows) and the kernel's (32 under the interpreter)


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("W", range(2, 9))
def test_ag_push_goes_to_r_minus_1_first_and_covers_each_split_once(W, consumer, monkeypatch):
    monkeypatch.setenv("FLUXLITE_CPU_CONSUMER", consumer)
    e = 5
    K = 24
    row = K * 4
    for rows, row_scale in itertools.product((1, 37, 10 * 64 + 3), (False, True)):
        position = {}  # (sender, receiver) -> place of the receiver in the sender's push order
        for r in range(W):
            ws, plan, call, steps, t = _program("ag", W, r, rows, K, 16, push=True, row_scale=row_scale, epoch=e)
            assert first_wait(steps) == len(steps), "a push program never waits: all of it goes ahead of the kernel"
            assert not _announces(steps, ws, e), "the alignment step announces the call, not the producer"
            order = []
            i = 0
            while i < len(steps):
                kind = ws.where(steps[i][1])
                if steps[i][0] != COPY or kind[0] != "data":
                    i += 1
                    continue
                p = kind[1]
                order.append(p)
                if row_scale:  # the scales first, into the scale area after the W*m gathered rows
                    at = ws.data_addr(p, e % 2) + _scales_offset(W * rows, row) + 4 * r * rows
                    assert steps[i] == (COPY, at, t["scales"].data_ptr(), 4 * rows), steps[i]
                    i += 1
                i = _check_split_pairs(ws, steps, e, i, p, lambda s: sch.data_slot(W, r, s),
                                       ws.data_addr(p, e % 2) + r * rows * row, t["a"].data_ptr(), row,
                                       plan.sched.split_rows, plan.sched.splits)
            assert order == [(r - k) % W for k in range(1, W)], f"W={W} r={r}: push order {order}"
            position.update({(r, p): k for k, p in enumerate(order)})
        # Peer p consumes chunks p+1, p+2, ...: each peer's k-th chunk is the k-th push its sender makes,
        # and the flag the sender sets is the one p's blocks of that chunk wait on, for the same rows.
        for p in range(W):
            sched = AG.schedule(W, p, rows, plan.sched.block_m)
            assert [position[(c, p)] for c in sched.peers()] == list(range(W - 1)), f"W={W} p={p}"
            for chunk, row0, n, slot in AG.kernel_blocks(sched, "").tolist():
                if chunk != p:
                    split = sch.split_of_data_slot(W, slot)
                    lo, hi = plan.sched.split_rows(split)
                    assert slot == sch.data_slot(W, chunk, split) and lo <= row0 and row0 + n <= hi


@pytest.mark.parametrize("W", range(2, 9))
def test_ag_pull_sets_every_ready_flag_before_it_waits_and_pulls_in_consumer_order(W):
    e, K, rows = 6, 8, 10 * 64 + 3
    row = K * 4
    for r in range(W):
        ws, plan, call, steps, t = _program("ag", W, r, rows, K, 16, push=False, epoch=e)
        assert _announces(steps, ws, e) == {"ready"}, "the signature is the alignment step's"
        waits = [i for i, s in enumerate(steps) if s[0] == WAIT]
        assert waits and waits[0] == first_wait(steps)
        # A missing peer leaves these waits to the kernel's timeout, which releases them.
        assert Program.of(steps)[:2] == (steps, waits[0])
        # Every peer may pull our rows before we wait on anyone: no cycle of waits at any W.
        staged = steps.index((STAGE, ws.data_addr(r, e % 2), t["a"].data_ptr(), rows * row))
        assert staged == 0, "the staging copy comes first: on CUDA it runs before the consumer"
        assert steps[-1] == (COPY, t["gathered"].data_ptr() + r * rows * row, t["a"].data_ptr(), rows * row), \
            "the caller's copy of its own rows goes last: nothing waits on it"
        assert not any(s[0] == STAGE for s in steps[1:]), "one staging copy (no row scale here)"
        readies = [steps.index((SIGNAL, _flag(ws, e, p, sch.ready_slot(r)), sch.SET)) for p in plan.sched.peers()]
        assert staged < min(readies) and max(readies) < waits[0], f"W={W} r={r}"
        peers = [s[3]["peer"] for s in steps if s[0] == WAIT]
        assert peers == list(plan.sched.peers()) == [(r + k) % W for k in range(1, W)], f"W={W} r={r}: {peers}"
        for i, p in zip(waits, peers):
            assert steps[i][1:3] == (_flag(ws, e, r, sch.ready_slot(p)), sch.SET)
            end = _check_split_pairs(ws, steps, e, i + 1, r, lambda s: sch.pulled_slot(W, p, s),
                                     t["gathered"].data_ptr() + p * rows * row, ws.data_addr(p, e % 2), row,
                                     plan.sched.split_rows, plan.sched.splits)
            assert end == len(steps) - 1 or steps[end][0] == WAIT
        blocks = AG.kernel_blocks(plan.sched, PULL).tolist()
        assert all(slot == sch.pulled_slot(W, c, sch.split_of_data_slot(W, slot)) for c, _, _, slot in blocks if c != r)


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("W", range(2, 9))
def test_rs_sends_to_r_plus_1_first_after_exactly_its_tiles(W, consumer, monkeypatch):
    monkeypatch.setenv("FLUXLITE_CPU_CONSUMER", consumer)
    e, K, N = 7, 8, 40
    for mc in (1, 37, 10 * 64 + 3):
        row = N * 4
        senders = {}  # (destination, split) -> the ranks whose partials land there
        for r in range(W):
            ws, plan, call, steps, t = _program("rs", W, r, W * mc, K, N, epoch=e)
            sched = plan.sched
            assert sched.chunk_order[0] == (r + 1) % W and sched.chunk_order[-1] == r, "r+1 first, local last"
            blocks = RS.kernel_blocks(sched, "").tolist()
            i = first_wait(steps)
            assert i == 0, "an RS program starts with its first wait: nothing of it goes ahead of the kernel"
            assert not _announces(steps, ws, e), "the alignment step announces the call, not the producer"
            dests = []
            while i < len(steps):
                d = ws.where(steps[i + 1][1])[1]  # the copy's destination rank
                dests.append(d)
                for s in range(sched.splits):
                    lo, hi = sched.split_rows(s)
                    # The tiles the consumer counts into (d, s): its blocks of chunk d in split s, times num_n.
                    tiles = sum(1 for c, _, _, slot in blocks if c == d and slot == sch.counter_slot(d, s)) * plan.num_n
                    assert tiles == sched.split_tiles(s, plan.num_n) > 0
                    assert steps[i][:3] == (WAIT, ws.counters.data_ptr() + 4 * sch.counter_slot(d, s), tiles)
                    assert steps[i + 1] == (COPY, ws.data_addr(d, e % 2) + (r * mc + lo) * row,
                                            t["partial"].data_ptr() + (d * mc + lo) * row, (hi - lo) * row)
                    assert steps[i + 2] == (SIGNAL, _flag(ws, e, d, sch.data_slot(W, r, s)), sch.SET)
                    senders.setdefault((d, s), []).append(r)
                    i += 3
            assert dests == [(r + k) % W for k in range(1, W)], f"W={W} r={r}: send order {dests}"
        # Every destination's local blocks wait on data_slot(0, s) + p * peer_slots() for each peer p:
        # exactly the slots the peers set, each set by one sender.
        for d in range(W):
            sched = RS.schedule(W, d, W * mc, plan.sched.block_m)
            for chunk, _, _, slot in RS.kernel_blocks(sched, "").tolist():
                if chunk == d:
                    s = sch.split_of_data_slot(W, slot)
                    assert slot == sch.data_slot(W, 0, s)
                    assert sorted(senders[(d, s)]) == [p for p in range(W) if p != d], (W, d, s)
                    assert all(slot + p * sch.peer_slots() == sch.data_slot(W, p, s) for p in range(W))


@pytest.mark.parametrize("W", range(2, 9))
def test_ar_gather_pushes_each_reduced_split_from_the_producer(W):
    """The gather's producer part: per split, a stream wait on our own consumer's count of that
    split's reduced tiles (released by our own bounded kernel, which counts every tile), then the
    split copied into every peer's ``gathered[r]`` from our rows of ``out`` (where the consumer
    reduced them), then our ``reduced`` flag of that split on every peer, behind the copy (a chunk
    past M, M = 1, moves nothing and still sets its flags). No wait on a peer: the waits for the
    peers' flags and the copy of their rows within this GPU are the call's end (:meth:`second_shot_end`)."""
    e, K, N = 7, 8, 40
    for M in (1, 10 * W + 3, 40 * W):
        for r in range(W):
            ws, plan, call, steps, t = _program("ar", W, r, M, K, N, epoch=e)
            mc, row, out = -(-M // W), N * 4, t["out"].data_ptr()
            red = out + r * mc * row
            gathered = _gathered_offset(W, mc, N, 4)
            counters = call.state.counters.data_ptr()
            peers = plan.sched.peers()
            rows_r = max(0, min(mc, M - r * mc))
            want = []
            flags = []
            for s, (lo, hi) in enumerate(plan.split_rows):
                want.append((WAIT, counters + 4 * sch.counter_slot(r, s), plan.sched.split_tiles(s, plan.num_n)))
                hi = min(hi, rows_r)
                want += [(COPY, ws.data_addr(p, e % 2) + gathered + (r * mc + lo) * row, red + lo * row, (hi - lo) * row)
                         for p in peers if hi > lo]
                want += [(SIGNAL, _flag(ws, e, p, sch.reduced_slot(W, r, s)), sch.SET) for p in peers]
                flags += [_flag(ws, e, p, sch.reduced_slot(W, r, s)) for p in peers]
            got = [s[:3] if s[0] == WAIT else s for s in steps]
            assert got == want, f"W={W} r={r} M={M}"
            assert all(ws.where(s[1])[0] == "data" and ws.where(s[1])[1] != r for s in steps if s[0] == COPY), \
                "copies go to the peers only"
            calls = stream_calls(steps)
            waits = [op for c in calls if c[0] == FLAGS for op in c[1] if op.operation == 1]
            assert all(op.address == counters + 4 * sch.counter_slot(r, s) for op, s in zip(waits, range(len(waits)))), \
                "the only stream waits are on our own consumer's counters"
            sets = [op.address for c in calls if c[0] == FLAGS for op in c[1] if op.operation == 2]
            assert sets == flags, "the reduced flags, in split order, and no other"


def _unbatched(calls: list) -> list:
    """The steps that stream ``calls`` enqueue, in order: each memop batch's ops read back from its
    ``CUstreamBatchMemOpParams`` array."""
    steps = []
    for call in calls:
        if call[0] in (COPY, WAIT):  # a WAIT call: a fed program's wait on a count's event
            steps.append(call)
            continue
        for op in call[1]:
            wait = op.operation == 1  # CU_STREAM_MEM_OP_WAIT_VALUE_32
            assert op.operation in (1, 2) and op.flags == 0, "a >= wait, or a write fenced before it stores"
            steps.append((WAIT if wait else SIGNAL, op.address, op.value))
    return steps


def test_a_stage_step_after_a_signal_or_a_wait_is_refused():
    """STAGE copies run on the caller's stream before the consumer, so a program must begin with them:
    one placed later would be run out of its order on CUDA."""
    stage, copy = (STAGE, 64, 128, 32), (COPY, 256, 512, 32)
    assert Program.of([stage, (SIGNAL, 8, 1), copy], cuda=True).staged == ((64, 128, 32),)
    for steps in ([(SIGNAL, 8, 1), stage], [copy, stage], [(WAIT, 8, 1, {}), stage]):
        with pytest.raises(ValueError, match="STAGE steps come first"):
            Program.of(steps, cuda=True)


@pytest.mark.parametrize("W", range(2, 9))
def test_cuda_stream_calls_enqueue_each_program_in_order_with_flag_runs_batched(W):
    """A CUDA program enqueues every step in its order, each maximal run of signals and waits as one
    ``cuStreamBatchMemOp`` (one graph node): RS's signal of a split and its wait on the next are one."""
    assert ctypes.sizeof(cu.MemOp) == 48, "CUstreamBatchMemOpParams is a 48-byte union"
    for op, push, rows in (("rs", True, W * 700), ("ag", True, 700), ("ag", False, 700)):
        ws, plan, call, steps, t = _program(op, W, W - 1, rows, 8, 40, push=push)
        program = Program.of(steps, cuda=True)
        before, after = program.on_stream
        staged = [s for s in steps if s[0] == STAGE]
        assert program.staged == tuple(s[1:] for s in staged) and steps[:len(staged)] == staged, (op, push)
        assert bool(staged) == (not push), "only AG pull stages rows (on the caller's stream, before the consumer)"
        # a wait's info stays on the host
        as_steps = [s if s[0] == COPY else s[:3] for s in steps[len(staged):]]
        assert _unbatched(before) + _unbatched(after) == as_steps, (op, push)
        assert _unbatched(before) == as_steps[:program.first_wait - len(staged)], "nothing from the first wait on goes ahead"
        for calls in (before, after):
            kinds = [c[0] for c in calls]
            assert all(not (x == y == FLAGS) for x, y in zip(kinds, kinds[1:])), "runs are maximal"
        if op == "rs":  # per peer and split: wait, copy, signal; the signal and the next wait share a batch
            n = len(plan.sched.peers()) * plan.sched.splits
            assert [c[0] for c in after] == [FLAGS, COPY] * n + [FLAGS]
    many = [(SIGNAL, 64 * i, 1) for i in range(cu.MAX_BATCH + 3)]
    calls = stream_calls(many)
    assert [len(c[1]) for c in calls] == [cu.MAX_BATCH, 3] and _unbatched(calls) == many


@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_a_peers_flag_set_right_after_a_copy_is_a_copy_of_the_set_word(W):
    """With a :class:`SignalCopy`, every signal of SET to a peer's flag that directly follows a copy
    in the program is a 4-byte copy of the SET word, at that place; every other step is enqueued as
    without it (this rank's own flags and signals after a wait stay stream writes), in the same order,
    and a fed program's pieces make the same calls, but for its waits: on its counts' events."""
    word = 0x77 << 40
    for op, push, rows in (("rs", True, W * 700), ("ag", True, 700), ("ag", False, 700), ("ar", True, W * 700)):
        ws, plan, call, steps, t = _program(op, W, W - 1, rows, 8, 40, push=push)
        own = range(ws.flag_addr(ws.rank, 0), ws.flag_addr(ws.rank, sch.num_flag_slots(W)))

        def expected(shares_batch: tuple) -> tuple[list, list]:
            """(indices of the signals enqueued as copies, every enqueued step) when a signal that
            follows a copy keeps its memop write only where the next step is one of ``shares_batch``."""
            copied = [i for i, s in enumerate(steps) if s[0] == SIGNAL and i and steps[i - 1][0] == COPY
                      and (i + 1 == len(steps) or steps[i + 1][0] not in shares_batch)
                      and ws.where(s[1])[:2] != ("flag", ws.rank)]
            return copied, [(COPY, s[1], word, 4) if i in copied else (s if s[0] == COPY else s[:3])
                            for i, s in enumerate(steps) if s[0] != STAGE]

        copied, want = expected((SIGNAL, WAIT))  # a flag operation after it would share its memop batch
        if op == "ag" and push:  # every split's flag
            assert len(copied) == (W - 1) * len(plan.split_rows), (W, len(copied))
        plain, by_copy = (Program.of(steps, cuda=True, signal_copy=c) for c in (None, SignalCopy(word, own)))
        got = _unbatched(by_copy.on_stream[0]) + _unbatched(by_copy.on_stream[1])
        assert got == want, (op, push)
        assert len(_unbatched(plain.on_stream[0]) + _unbatched(plain.on_stream[1])) == len(got)
        if op in ("rs", "ar"):  # the matmul consumer's feed enqueues a wait apart from the signal before it
            fed = Program.of(steps, cuda=True, fed=True, signal_copy=SignalCopy(word, own))
            got = _unbatched(fed.on_stream[0]) + _unbatched([c for _, _, calls in fed.pieces for c in calls])
            assert got == [s[:2] if s[0] == WAIT else s for s in expected((SIGNAL,))[1]], op


def test_the_address_map_tells_ranks_and_slots_apart():
    """The checks above read ranks and slots back from fake addresses: they must be unambiguous."""
    ws = _AddressMap(8, 3)
    seen = {}
    for p, parity in itertools.product(range(8), range(2)):
        seen[ws.data_addr(p, parity) + 12345] = ("data", p, parity, 12345)
    for p, slot in itertools.product(range(8), range(sch.num_flag_slots(8))):
        seen[ws.flag_addr(p, slot)] = ("flag", p, slot)
    assert all(ws.where(addr) == what for addr, what in seen.items())
    assert ws.where(torch.empty(4).data_ptr())[0] == "local"


def test_the_profiler_takes_its_world_size_from_the_gpus_or_torchrun(monkeypatch):
    """fluxlite-profile spawns one rank per GPU by default (the machine's TP), torchrun's WORLD_SIZE
    under torchrun, and 2 CPU ranks without 2 GPUs or with --device cpu."""
    from fluxlite.profile import cli

    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    args = cli.parse_args(["--model", "llama3-70b", "--tokens", "16384"])
    assert (args.world_size, args.nproc, args.device, args.dtype) == (8, 8, "cuda", "bf16")
    qkv = (64 + 2 * 8) * 128  # Llama-3-70B's QKV outputs, split over the 8 ranks
    assert ("ag_gemm", 16384, 8192, qkv // 8) in {(s.op, s.M, s.K, s.N) for s in args.shapes}
    assert cli.parse_args(["--shape", "64,32,48", "--device", "cpu"]).world_size == 2
    assert cli.parse_args(["--shape", "96,32,48", "--nproc", "3", "--device", "cpu"]).world_size == 3
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert (cli.parse_args(["--shape", "64,32,48"]).world_size, cli.parse_args(["--shape", "64,32,48"]).device) == (
        2, "cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert cli.parse_args(["--model", "llama3-70b"]).world_size == 4


# ---- 3. the W-generic GPU tests at every GPU of the machine (for nvidia-h200-x4 / x8) -------------
# tests/test_gpu_*.py run at 2 GPUs. Their workers that work at any world size run here again on
# gpu_world_size() GPUs (FLUXLITE_GPU_RANKS, which scripts/gpu_suite.sh sets to its NPROC, else every
# visible GPU), when that is more than 2. Each is imported when it runs, so a CPU-only CI never
# imports more than this file. Pick one with ``-k``: the time of each grows with the world size.


def _gpu_fused_shapes(rank: int, W: int) -> None:
    """tests/test_gpu_fused.py's anchor and ragged shapes at W ranks, RS's M cut to a multiple of W."""
    from .gpu_utils import dev
    from .test_gpu_fused import AG_SHAPES, RS_SHAPES, _check_ag, _check_rs

    gen = torch.Generator(device=dev()).manual_seed(100 + rank)
    for (M, K, N), with_bias in itertools.product(AG_SHAPES, (False, True)):
        _check_ag(M // W, K, N, with_bias, gen)
    for (M, K, N), with_bias in itertools.product(RS_SHAPES, (False, True)):
        _check_rs(M - M % W, K, N, with_bias, gen)


def _layer_matrix_args():
    from .test_parallel import SEED as LAYER_SEED
    from .test_parallel_gpu import BF16_TOL

    return LAYER_SEED, torch.bfloat16, ("fused", "sequential"), BF16_TOL


LAZY = {"CUDA_MODULE_LOADING": "LAZY"}
GPU_CASES = {  # name: (module, worker, () -> extra args, env, limit_s)
    "fused_shapes": ("tests.test_world_sizes", "_gpu_fused_shapes", tuple, LAZY, 300),
    "first_call": ("tests.test_gpu_fused", "_first_call", tuple, LAZY, 240),
    "thousand_calls": ("tests.test_gpu_fused", "_thousand_calls", tuple, None, 300),
    "epilogues": ("tests.test_gpu_epilogue", "_cases", tuple, None, 240),
    "liveness_sweep": ("tests.test_gpu_safety", "_sweep", tuple, None, 420),
    "missing_peer": ("tests.test_gpu_safety", "_missing_peer", tuple, None, 300),
    "recovery": ("tests.test_gpu_safety", "_recovery", tuple, None, 240),
    "layer_matrix": ("tests.test_parallel_gpu", "_gpu_matrix", _layer_matrix_args, None, 240),
    "gemm_ar": ("tests.test_gpu_gemm_ar", "_eager", lambda: (17,), None, 300),
    "gemm_ar_one_shot": ("tests.test_gpu_gemm_ar", "_eager", lambda: (29, True), None, 240),
    "small_chunks": ("tests.test_gpu_fused", "_small_chunks", tuple, None, 240),
    "small_rs": ("tests.test_gpu_fused", "_small_rs_calls", tuple, None, 240),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpu_tests_at_every_gpu(case):

    from .gpu_utils import gpu_world_size, run_gpu_ranks

    W = gpu_world_size()
    if W <= 2:
        pytest.skip(f"runs at more than 2 GPUs (FLUXLITE_GPU_RANKS or every visible GPU), got {W}; "
                    "tests/test_gpu_*.py cover 2")
    module, worker, args, env, limit_s = GPU_CASES[case]
    fn = getattr(importlib.import_module(module), worker)
    run_gpu_ranks(fn, W, *args(), env=env, limit_s=limit_s)


def _ops_on_shared_and_separate_gpus(rank: int, W: int) -> None:
    """AG push (with the gathered input), GEMM-RS, and GEMM-AllReduce one-shot and two-shot, each
    against float32 on poisoned outputs, with ranks that share one GPU and ranks on another."""
    import fluxlite

    from .gpu_utils import dev, rel_err
    from .test_gpu_fused import _check_ag, _check_rs
    from .test_gpu_gemm_ar import TOL

    gen = torch.Generator(device=dev()).manual_seed(300 + rank)
    _check_ag(200, 1024, 768, True, gen)
    _check_rs(W * 130, 1024, 768, False, gen)
    for M in (5, 2000):  # one shot, two shots
        full = torch.Generator(device=dev()).manual_seed(M)  # the same full operands on every rank
        a_full = torch.randn(M, W * 512, generator=full, device=dev()).to(torch.bfloat16)
        w_full = (torch.randn(1000, W * 512, generator=full, device=dev()) / (W * 512) ** 0.5).to(torch.bfloat16)
        cols = slice(rank * 512, (rank + 1) * 512)
        out = torch.full((M, 1000), float("nan"), device=dev(), dtype=torch.bfloat16)
        fluxlite.gemm_ar(a_full[:, cols].contiguous(), w_full[:, cols].contiguous(), impl="fused", out=out)
        fluxlite.synchronize()
        err = rel_err(out, a_full.float() @ w_full.float().t())
        assert err < TOL, f"GEMM-AllReduce M={M} at W={W}: rel err {err:.3g}"


@pytest.mark.gpu
def test_more_ranks_than_gpus_on_several_gpus(monkeypatch):
    """W = GPUs + 1 ranks on two or more GPUs (``fluxlite.init`` and the tests put rank ``r`` on GPU
    ``r % GPUs``): some peers share this rank's GPU, others are on another, whose buffers a rank
    opens by CUDA IPC and reaches through peer access."""
    from .gpu_utils import run_gpu_ranks

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        pytest.skip(f"needs 2 or more CUDA GPUs, got {gpus}")
    monkeypatch.setenv("FLUXLITE_GPU_SHARE", "1")
    run_gpu_ranks(_ops_on_shared_and_separate_gpus, gpus + 1, limit_s=240)
