"""Liveness of the fused kernels' tile claiming and publishing, simulated on the schedule's tables.

The simulation runs ``W`` ranks, each with ``grid`` persistent programs of which at most
``resident`` run at once (the rest start as running ones finish, as on a GPU whose other SMs are
busy), and each with its producer. Steps interleave in a random order. A program follows the GEMM-RS
kernel's loops (fluxlite/kernels/gemm_rs.py): claim a run of tiles (the peer chunks' runs, then the
local chunk's), and for each tile of it run the main loop, count the peer tile stored last, then
store (a tile among the table's first ``peer_tiles``) or wait for every peer's flag (a local tile). The producer waits for each (peer, split) counter to
reach its tile count, pushes the split once, and sets the destination's flag.

Properties: the run never gets stuck (some step can always go until everything is done), every
counter ends exactly at its count, every split is pushed exactly once, and every tile runs once.
The tables are the ones the kernels read (``kernel_blocks``, ``tile_order``), so an order that
could deadlock the GPU fails here. The last test shows the simulation can fail: a grouped tile
order whose groups straddle chunks deadlocks it on a GEMM-RS shape.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxlite import schedule as sch
from fluxlite.kernels.gemm_rs import RUN_WAVES as _RUN_WAVES
from fluxlite.ops import AG, AR, RS

RUN_WAVES = _RUN_WAVES.value

pytestmark = pytest.mark.timeout(120)


class Stuck(Exception):
    pass


def simulate_rs(W: int, chunk_rows: int, block_m: int, num_n: int, group_m: int, grid: int, resident: int,
                seed: int, order=None, by_split: bool = False) -> None:
    rng = random.Random(seed)
    scheds = [sch.build(W, r, chunk_rows, block_m, RS.first) for r in range(W)]
    s0 = scheds[0]
    counters = [dict() for _ in range(W)]  # counter slot -> count
    flags = [set() for _ in range(W)]  # data slots set on rank r
    pushed = [dict() for _ in range(W)]  # (dst, split) -> times pushed by rank r
    ran = [[0] * (s0.num_blocks * num_n) for _ in range(W)]
    peer_tiles = len(ran[0]) - s0.local_tiles(num_n)
    programs, producers = [], []
    for r, s in enumerate(scheds):
        blocks = RS.kernel_blocks(s, "").tolist()
        tiles = (order or (lambda s: s.tile_order(num_n, group_m, by_split).tolist()))(s)
        claim = iter(range(10**9))
        for pid in range(grid):
            programs.append(_rs_program(r, W, pid, grid, peer_tiles, blocks, tiles, claim, counters[r], flags[r],
                                        ran[r]))
        steps = []
        for d in s.peers():
            for sp in range(s.splits):
                steps.append((sch.counter_slot(d, sp), s.split_tiles(sp, num_n), d, sp))
        producers.append(_producer(r, W, steps, counters[r], flags, pushed[r]))
    # Per rank: programs start in pid order, at most `resident` at a time.
    waiting = [[p for i, p in enumerate(programs) if i // grid == r] for r in range(W)]
    running = [[] for _ in range(W)]
    live = list(producers)
    while any(waiting) or any(running) or live:
        for r in range(W):
            while waiting[r] and len(running[r]) < resident:
                running[r].append(waiting[r].pop(0))
        candidates = [(r, g) for r in range(W) for g in running[r]] + [(None, g) for g in live]
        rng.shuffle(candidates)
        for r, gen in candidates:
            try:
                if next(gen):  # True: made progress
                    break
            except StopIteration:
                (running[r] if r is not None else live).remove(gen)
                break
        else:
            raise Stuck("no program or producer can make progress")
    for r, s in enumerate(scheds):
        for d in s.peers():
            for sp in range(s.splits):
                assert counters[r].get(sch.counter_slot(d, sp), 0) == s.split_tiles(sp, num_n)
                assert pushed[r].get((d, sp), 0) == 1
        assert ran[r] == [1] * len(ran[r])


def _runs(claim: int, grid: int, first_tile: int, tiles: int) -> range:
    """The tiles of claim ``claim`` among ``tiles`` tiles from ``first_tile``, as the kernel's
    ``run_tiles`` computes them."""
    span = RUN_WAVES * grid
    first = first_tile + (claim // grid) * span + claim % grid
    return range(first, min(first_tile + tiles, first_tile + (claim // grid + 1) * span), grid)


def _rs_program(r, W, pid, grid, peer_tiles, blocks, tiles, claim, counters, flags, ran):
    """One persistent program of rank r's GEMM-RS kernel, as a generator of steps: it claims runs of
    peer tiles, then runs of local tiles."""
    local_tiles = len(tiles) - peer_tiles
    peer_claims = -(-peer_tiles // (RUN_WAVES * grid)) * grid
    claims = peer_claims + -(-local_tiles // (RUN_WAVES * grid)) * grid
    pending = -1
    c = next(claim)
    while c < claims:
        run = _runs(c, grid, 0, peer_tiles) if c < peer_claims else _runs(c - peer_claims, grid, peer_tiles,
                                                                          local_tiles)
        for tile in run:
            i, j = tiles[tile]
            chunk, _row0, _rows, slot = blocks[i]
            yield True  # main loop
            if pending >= 0:
                counters[pending] = counters.get(pending, 0) + 1
                yield True
            pending = -1
            if tile < peer_tiles:
                pending = slot
            else:
                for p in range(W):
                    if p != r:
                        while slot + p * sch.peer_slots() not in flags:
                            yield False
            ran[tile] += 1
            yield True
        c = next(claim)
    if pending >= 0:
        counters[pending] = counters.get(pending, 0) + 1
    yield True


def _producer(r, W, steps, counters, flags, pushed):
    for slot, target, d, sp in steps:
        while counters.get(slot, 0) < target:
            yield False
        pushed[(d, sp)] = pushed.get((d, sp), 0) + 1
        flags[d].add(sch.data_slot(W, r, sp))
        yield True


@st.composite
def rs_cases(draw):
    W = draw(st.integers(2, 5))
    block_m = draw(st.sampled_from([1, 2, 4, 16]))
    chunk_rows = draw(st.integers(1, 12 * block_m))
    num_n = draw(st.integers(1, 6))
    group_m = draw(st.sampled_from([1, 2, 3, 8]))
    tiles = W * -(-chunk_rows // block_m) * num_n
    # Grids below, between one and two times, and above the tile count, as on the GPU (grid = SMs).
    grid = draw(st.sampled_from([1, 2, max(1, tiles // 2 + 1), max(1, tiles - 1), tiles + 3]) | st.integers(1, 40))
    resident = draw(st.integers(1, grid))
    return W, chunk_rows, block_m, num_n, group_m, grid, resident, draw(st.integers(0, 2**16)), None, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(rs_cases())
def test_rs_claiming_and_publishing_always_completes(case):
    simulate_rs(*case)


def test_rs_m1024_n8192_on_132_programs_completes():
    """W=2, M=1024 (chunk 512 rows = 4 blocks of 128), N=8192 (32 column blocks), grid 132."""
    for seed in range(5):
        simulate_rs(2, 512, 128, 32, 8, 132, 132, seed)


def _chunk_straddling_order(num_n, group_m):
    """Groups of ``group_m`` row blocks over the whole table, across chunks (a local tile, which
    waits for the peers, can then be claimed before a peer tile that they wait for)."""
    def order(s):
        nb = s.num_blocks
        out = []
        for t in range(nb * num_n):
            per_group = group_m * num_n
            first = (t // per_group) * group_m
            size = min(nb - first, group_m)
            out.append((first + (t % per_group) % size, (t % per_group) // size))
        return out
    return order


def test_the_simulation_catches_a_chunk_straddling_order():
    """With local tiles among the peer tiles the kernel counts what it must not (and waits where it
    must not): the run gets stuck or ends with wrong counts."""
    with pytest.raises((Stuck, AssertionError)):
        simulate_rs(2, 512, 128, 32, 8, 132, 132, 0, order=_chunk_straddling_order(32, 8))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(0, 5), st.integers(1, 300), st.sampled_from([1, 7, 16, 64]),
       st.integers(1, 9), st.sampled_from([1, 2, 8]))
def test_tile_order_covers_every_tile_once_and_never_mixes_chunks_or_splits(W, rank, rows, block_m, num_n, group_m):
    rank %= W
    # GEMM-RS takes either order (TileSchedule.split_groups_keep_reuse); GEMM-AllReduce, its schedule
    # and kernel, always the split-bounded one
    for op, by_split in ((AG, False), (RS, False), (RS, True), (AR, True)):
        s = sch.build(W, rank, rows, block_m, op.first)
        order = s.tile_order(num_n, group_m, by_split).tolist()
        assert sorted(map(tuple, order)) == [(i, j) for i in range(s.num_blocks) for j in range(num_n)]
        chunk_pos = [i // s.blocks_per_chunk for i, _ in order]
        assert chunk_pos == sorted(chunk_pos), "a later chunk's tile comes before an earlier chunk's"
        if by_split:
            split_pos = [(c, int(s.blocks[i][3])) for c, (i, _) in zip(chunk_pos, order)]
            assert split_pos == sorted(split_pos), "a later split's tile comes before an earlier split's"
        if op is not AG:
            blocks = op.kernel_blocks(s, "").tolist()
            local = [blocks[i][0] == rank for i, _ in order]
            assert local == sorted(local), "a local (waiting) tile comes before a peer tile"
