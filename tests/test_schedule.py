"""The tile schedule (fluxlite.schedule): coverage, order, splits, flag slots, bad arguments.

Every path (CPU protocol, Triton kernels, GPU producers) reads this one schedule, so these
properties are what keep all of them correct. Property tests run over many (W, rank, rows, block,
splits) combinations through hypothesis.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxlite import schedule as sch
from fluxlite.ops import AG, OPS, RS

pytestmark = pytest.mark.timeout(120)


@st.composite
def schedules(draw):
    op = draw(st.sampled_from([AG, RS]))
    world_size = draw(st.integers(1, 9))
    rank = draw(st.integers(0, world_size - 1))
    block_m = draw(st.sampled_from([1, 2, 7, 16, 64, 128]) | st.integers(1, 200))
    chunk_rows = draw(st.integers(1, 40 * block_m) if block_m < 50 else st.integers(1, 2000))
    nb = -(-chunk_rows // block_m)
    if nb >= sum(sch.TAPER) and draw(st.booleans()):  # GEMM-AllReduce's tapered splits
        return sch.build(world_size, rank, chunk_rows, block_m, op.first, tapered=True), len(sch.TAPER)
    splits = draw(st.none() | st.integers(1, min(sch.MAX_SPLITS, nb)))
    return sch.build(world_size, rank, chunk_rows, block_m, op.first, splits), splits


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_every_row_of_every_chunk_runs_exactly_once(case):
    s, _ = case
    nb = -(-s.chunk_rows // s.block_m)
    assert s.blocks.dtype == torch.int32 and tuple(s.blocks.shape) == (s.world_size * nb, 4)
    assert s.num_blocks == s.world_size * nb and s.blocks_per_chunk == nb
    seen = torch.zeros(s.world_size, s.chunk_rows, dtype=torch.int64)
    for chunk, row0, rows, _split in s.rows():
        assert 0 <= chunk < s.world_size
        assert rows >= 1
        seen[chunk, row0 : row0 + rows] += 1
    assert bool((seen == 1).all()), "some row is computed twice or never"


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_blocks_are_aligned_never_straddle_chunks_and_only_the_last_is_ragged(case):
    s, _ = case
    ragged = s.chunk_rows - (s.blocks_per_chunk - 1) * s.block_m
    for chunk, row0, rows, _split in s.rows():
        assert row0 % s.block_m == 0
        assert row0 + rows <= s.chunk_rows, "a block runs past its chunk"
        last = row0 // s.block_m == s.blocks_per_chunk - 1
        assert rows == (ragged if last else s.block_m)


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_chunk_order(case):
    s, _ = case
    W, r = s.world_size, s.rank
    if s.chunk_order[0] == r:  # AG's: the local chunk first (no wait), then r+1, r+2, ...
        expected = tuple((r + i) % W for i in range(W))
    else:  # RS's: the chunk for r+1 first, ..., the local chunk last
        expected = tuple((r + 1 + i) % W for i in range(W))
    assert s.chunk_order == expected
    assert s.peers() == tuple(c for c in expected if c != r) and len(s.peers()) == W - 1
    # The run order visits whole chunks in that order, row blocks ascending within each chunk.
    run = list(s.rows())
    nb = s.blocks_per_chunk
    assert [c for c, *_ in run] == [c for c in expected for _ in range(nb)]
    for i, c in enumerate(expected):
        assert [row0 for _, row0, _, _ in run[i * nb : (i + 1) * nb]] == [b * s.block_m for b in range(nb)]


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_splits_cover_blocks_contiguously(case):
    s, requested = case
    nb = s.blocks_per_chunk
    assert 1 <= s.splits <= min(sch.MAX_SPLITS, nb)
    if requested is not None:
        assert s.splits == requested
    else:
        assert s.splits == sch.default_splits(nb, s.world_size)
    ranges = [s.split_blocks(i) for i in range(s.splits)]
    assert ranges[0].start == 0 and ranges[-1].stop == nb
    for prev, cur in zip(ranges, ranges[1:]):
        assert prev.stop == cur.start
    assert all(len(rg) >= 1 for rg in ranges), "an empty split would have a flag nobody sets"
    rows = [s.split_rows(i) for i in range(s.splits)]
    assert rows[0][0] == 0 and rows[-1][1] == s.chunk_rows
    for (_, hi), (lo, _) in zip(rows, rows[1:]):
        assert hi == lo
    # The split column of every block agrees with split_blocks, in every chunk.
    for _chunk, row0, _rows, split in s.rows():
        assert row0 // s.block_m in s.split_blocks(split)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8, 16])
def test_flag_slots_never_collide(world_size):
    W, S = world_size, sch.MAX_SPLITS
    slots = {}

    def claim(slot, owner):
        assert 0 <= slot < sch.num_flag_slots(W), f"{owner}: slot {slot} outside the flag array"
        assert slot not in slots, f"{owner} and {slots[slot]} share flag slot {slot}"
        slots[slot] = owner

    R = sch.region_slots(W)
    for parity in range(2):
        base = sch.region_start(W, parity)
        in_region = []
        for src in range(W):
            in_region += [sch.ready_slot(src), sch.finished_slot(W, src)]
            claim(base + sch.ready_slot(src), ("ready", parity, src))
            claim(base + sch.finished_slot(W, src), ("finished", parity, src))
        for src, split in itertools.product(range(W), range(S)):
            in_region += [sch.data_slot(W, src, split), sch.pulled_slot(W, src, split),
                          sch.reduced_slot(W, src, split)]
            claim(base + sch.data_slot(W, src, split), ("data", parity, src, split))
            claim(base + sch.pulled_slot(W, src, split), ("pulled", parity, src, split))
            claim(base + sch.reduced_slot(W, src, split), ("reduced", parity, src, split))
            for slot_of in (sch.data_slot, sch.pulled_slot, sch.reduced_slot):
                assert sch.split_of_data_slot(W, slot_of(W, src, split)) == split
            assert sch.reduced_slot(W, src, split) == sch.reduced_slot(W, 0, split) + src * sch.MAX_SPLITS
            assert sch.data_slot(W, src, split) == sch.data_slot(W, 0, split) + src * sch.peer_slots()
        # A region is what a call's owner clears: its flags, then padding nobody writes.
        assert sorted(in_region) == list(range(len(in_region))) and len(in_region) <= R
        # Both regions start 256-byte aligned: the kernels see one pointer alignment whatever the parity.
        assert (4 * base) % 256 == 0 and R % sch.REGION_ALIGN == 0
    padding = 2 * (R - (2 * W + 3 * W * S))
    for parity, src, word in itertools.product(range(2), range(W), range(sch.SIG_WORDS)):
        claim(sch.signature_slot(W, parity, src) + word, ("signature", parity, src, word))
    assert len(slots) + padding == sch.num_flag_slots(W), "the flag array has slots nobody uses"
    counters = [sch.counter_slot(d, s) for d, s in itertools.product(range(W), range(S))] + [sch.claim_slot(W)]
    assert sorted(counters) == list(range(sch.num_counters(W))), "counters must tile the counter array"


def test_call_signature_round_trips_and_tells_calls_apart():
    sig = sch.call_signature(AG.code, 16, 24, 40, torch.bfloat16, 3, (True, False))
    assert len(sig) == sch.SIG_WORDS and all(-(2**31) <= w < 2**31 for w in sig)
    assert sch.describe_signature(sig) == "ag_gemm(rows=16, K=24, N=40, bfloat16, return_gathered=True, row_scale=False, splits=3)"
    assert sch.describe_signature(sch.call_signature(RS.code, 64, 8, 9, torch.float32, 1)) == \
        "gemm_rs(rows=64, K=8, N=9, float32, splits=1)"
    variants = {sch.call_signature(op.code, rows, 24, 40, dt, sp, (keep,))
                for op in (AG, RS) for rows in (16, 17) for dt in (torch.bfloat16, torch.float16)
                for sp in (1, 2) for keep in (False, True)}
    assert len(variants) == 32, "two different calls share a signature"


def test_default_splits():
    assert sch.default_splits(100, 1) == 1  # no communication: one split
    assert sch.default_splits(1, 4) == 1
    assert sch.default_splits(8, 2) == 2  # about four blocks per split
    assert sch.default_splits(16, 2) == 4
    assert sch.default_splits(10_000, 8) == sch.DEFAULT_MAX_SPLITS <= sch.MAX_SPLITS


@pytest.mark.parametrize(
    "args, match",
    [
        ((2, 2, 10, 4), "rank"),
        ((2, -1, 10, 4), "rank"),
        ((0, 0, 10, 4), "rank"),
        ((2, 0, 0, 4), "chunk_rows"),
        ((2, 0, 10, 0), "block_m"),
        ((2, 0, 10, 4, 0), "splits"),
        ((2, 0, 10, 4, 4), "splits"),  # 3 blocks: at most 3 splits
        ((2, 0, 100_000, 1, sch.MAX_SPLITS + 1), "splits"),
    ],
)
@pytest.mark.parametrize("first", [AG.first, RS.first])
def test_bad_arguments_raise_value_error(first, args, match):
    world_size, rank, chunk_rows, block_m, *splits = args
    with pytest.raises(ValueError, match=match):
        sch.build(world_size, rank, chunk_rows, block_m, first, *splits)


@pytest.mark.parametrize("chunk_rows, block_m, splits", [(7 * 64, 64, None), (100, 16, 2), (8 * 64, 64, 4)])
def test_a_tapered_schedule_of_too_few_blocks_or_other_splits_raises_value_error(chunk_rows, block_m, splits):
    with pytest.raises(ValueError, match="tapered"):
        sch.build(2, 0, chunk_rows, block_m, RS.first, splits, tapered=True)


@settings(max_examples=60, deadline=None)
@given(st.integers(sum(sch.TAPER), 1500))
def test_tapered_splits_follow_their_weights_to_a_block(blocks):
    """A half, three eighths and an eighth of the blocks, each within one block of its share, in order;
    a tapered schedule's block table, split rows and split-bounded tile order all take them."""
    total = sum(sch.TAPER)
    spans = [sch.split_span(i, blocks, len(sch.TAPER), tapered=True) for i in range(len(sch.TAPER))]
    assert spans[0].start == 0 and spans[-1].stop == blocks
    assert all(a.stop == b.start for a, b in zip(spans, spans[1:]))
    for span, weight in zip(spans, sch.TAPER):
        assert abs(len(span) - weight * blocks / total) < 1, (blocks, spans)
    s = sch.build(2, 1, blocks * 16 - 5, 16, RS.first, tapered=True)
    assert s.splits == len(sch.TAPER) and [s.split_blocks(i) for i in range(s.splits)] == spans
    for _chunk, row0, _rows, split in s.rows():
        assert row0 // 16 in spans[split]
    order = s.tile_order(2, 8, by_split=True).tolist()  # each split's tiles before the next split's
    splits_in_order = [int(s.blocks[i, 3]) for i, _ in order[: blocks * 2]]
    assert splits_in_order == sorted(splits_in_order)


def test_gemm_ar_tapers_where_the_last_eighth_of_a_chunk_fills_a_wave():
    """The rule, on the calls' shapes only (the same on every rank): 8192 x 8192 at two ranks has a last
    split of 512 rows (4 x 32 tiles of 128x256), tapered; 4096 rows (2 x 32) and 6000 x 5000 (3 x 20)
    are not; one rank, or a chunk of fewer than eight blocks, never."""
    from fluxlite.ops import AR

    assert AR.tapers(2, 8192, 8192) and AR.tapers(2, 16384, 4096) and AR.tapers(4, 16384, 8192)
    assert not AR.tapers(2, 4096, 8192) and not AR.tapers(2, 6000, 5000)
    assert not AR.tapers(1, 65536, 65536) and not AR.tapers(2, 14 * 64, 1 << 20)


def test_a_bad_op_code_or_too_many_options_raise_value_error():
    for code, options in ((0, ()), (16, ()), (1, (False,) * (sch.MAX_OPTIONS + 1))):
        with pytest.raises(ValueError, match="op code"):
            sch.call_signature(code, 8, 8, 8, torch.float32, 1, options)


def test_every_op_describes_its_signature_by_name():
    """An op's call signatures read back as its name and its options (the mismatch errors say them)."""
    for op in OPS.values():
        options = tuple(i % 2 == 0 for i in range(len(op.option_bits)))
        words = sch.call_signature(op.code, 12, 34, 56, torch.bfloat16, 3, options)
        text = sch.describe_signature(words)
        assert text.startswith(f"{op.name}(rows=12, K=34, N=56, bfloat16") and text.endswith("splits=3)"), text
        for name, on in zip(op.option_bits, options):
            assert f"{name}={on}" in text, text


@pytest.mark.parametrize("num_n, split_rows, expected", [
    (16, 512, True),    # 4-block splits of 16 column blocks: two groups side by side fill a wave, 8 rows as wide groups do
    (32, 512, False),   # 4-block splits of 32 column blocks: a wave covers 4 rows, wide groups of 8 cover 8
    (48, 512, False),
    (32, 1024, True),   # splits of 8 blocks are groups of 8 already
    (8, 256, True),     # small splits and few column blocks: several groups per wave either way
])
def test_split_bounded_groups_are_taken_where_they_keep_the_weights_reuse(num_n, split_rows, expected):
    """GEMM-RS's choice of tile order (measured on 2xH200: split-bounded groups of 4 cost 4-9% at 32
    column blocks, and nothing at 16)."""
    s = sch.build(2, 0, 4 * split_rows, 128, 1, splits=4)  # 4 splits of split_rows rows each
    assert s.split_groups_keep_reuse(num_n, 8, 132) is expected
    order = s.tile_order(num_n, 8, expected).tolist()
    assert sorted(map(tuple, order)) == [(i, j) for i in range(s.num_blocks) for j in range(num_n)]


def test_each_op_takes_its_own_tile_order():
    """AG-GEMM groups across splits; GEMM-RS bounds them by splits where that keeps the weight's reuse
    (16 column blocks here) and not where it does not (32); GEMM-AllReduce's two shots always do."""
    from fluxlite.ops import AR

    s = sch.build(2, 0, 2048, 128, 1, splits=4)  # chunks of 16 row blocks, splits of 4
    wide = {n: s.tile_order(n, 8).tolist() for n in (16, 32)}
    by_split = {n: s.tile_order(n, 8, by_split=True).tolist() for n in (16, 32)}
    assert all(wide[n] != by_split[n] for n in (16, 32))
    assert RS.tile_order(s, 16, 8, 132).tolist() == by_split[16]
    assert RS.tile_order(s, 32, 8, 132).tolist() == wide[32]
    assert AR.tile_order(s, 32, 8, 132).tolist() == by_split[32]
    assert AG.tile_order(s, 16, 8, 132).tolist() == wide[16]


def test_ag_takes_one_split_per_chunk_on_cuda_where_its_chunk_is_one_wave():
    """AG-GEMM on CUDA: the matmul consumer always one split; the Triton kernel one where the chunk's
    tiles fit in one wave of its programs, else two."""
    from fluxlite.kernels.gemm_core import GemmConfig
    from fluxlite.ops.ag_gemm import cuda_splits

    config = GemmConfig(block_m=128, block_n=256, num_progs=132)
    cpu = torch.device("cpu")  # the config names its programs: no device is asked
    assert cuda_splits("torch", 8192, 14336, config, False, cpu) == 1
    assert cuda_splits("triton", 2278, 768, config, False, cpu) == 1  # 18 x 3 = 54 tiles
    assert cuda_splits("triton", 2048, 2048, config, False, cpu) == 1  # 16 x 8 = 128: one wave
    assert cuda_splits("triton", 2048, 2112, config, False, cpu) == 2  # 16 x 9 = 144 tiles
    assert cuda_splits("triton", 2048, 2048, config, True, cpu) == 2  # gated: 128-column tiles, 256 of them
    assert cuda_splits("triton", 1, 256 * 132, config, False, cpu) == 1
    assert cuda_splits("triton", 1, 256 * 132 + 1, config, False, cpu) == 2  # the plan keeps one: one row block
