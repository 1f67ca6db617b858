"""Bounded collectives over the store: they agree on values on every rank, and a rank that never
arrives is named within the timeout.

A skipping rank stays alive and outside the collective: it waits on the store (not on the group)
until the others are done, so a wait that ignored its deadline would hang here and pytest-timeout
would fail the test.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from fluxlite import rendezvous
from fluxlite.errors import FluxliteTimeoutError
from fluxlite.group import TPGroup, resolve_group

from .dist_utils import run_ranks

TIMEOUT_S = 1.0
SLACK_S = 2.0  # scheduling noise allowed past the deadline on a loaded 2-core machine
GENEROUS = dict(timeout_s=30.0, op="test", step="agree")


def _agree(rank: int, W: int) -> None:
    tp = resolve_group()
    raw = dist.distributed_c10d._get_default_store()
    for i in range(50):
        raw.set(f"before/{i}/{rank}", "")
        rendezvous.barrier(tp, f"b/{i}", **GENEROUS)
        # Nobody leaves barrier i before everyone has entered it.
        assert raw.check([f"before/{i}/{r}" for r in range(W)]), f"barrier {i} let rank {rank} through early"
    for src in range(W):
        mine = f"from {src}: héllo" if rank == src else None
        assert rendezvous.broadcast_str(tp, f"s/{src}", mine, src=src, **GENEROUS) == f"from {src}: héllo"
    assert rendezvous.broadcast_str(tp, "empty", "" if rank == 0 else None, **GENEROUS) == ""
    assert rendezvous.all_gather_int(tp, "g", 10**12 * rank - 3, **GENEROUS) == [10**12 * r - 3 for r in range(W)]
    assert rendezvous.all_gather_str(tp, "gs", f"r{rank}/é" * rank, **GENEROUS) == [f"r{r}/é" * r for r in range(W)]
    # The same key in another group is another key.
    sub = resolve_group(dist.new_group(list(range(W))))
    assert sub.name != tp.name
    assert rendezvous.all_gather_int(sub, "g", 7 * rank, **GENEROUS) == [7 * r for r in range(W)]


def _call(tp: TPGroup, kind: str, key: str, src: int, **kw) -> None:
    if kind == "barrier":
        rendezvous.barrier(tp, key, **kw)
    elif kind == "broadcast_str":
        rendezvous.broadcast_str(tp, key, "v" if tp.rank == src else None, src=src, **kw)
    else:
        rendezvous.all_gather_int(tp, key, tp.rank, **kw)


def _missing_peer(rank: int, W: int, scenarios: list[tuple[str, set[int], int]]) -> None:
    """Per scenario ``(kind, skippers, expect_peer)``: ranks outside ``skippers`` call ``kind`` and must
    name ``expect_peer``; for broadcast_str, ``expect_peer`` is also the src."""
    tp = resolve_group()
    raw = dist.distributed_c10d._get_default_store()
    for i, (kind, skippers, expect_peer) in enumerate(scenarios):
        tag = f"{kind}-{i}"
        if rank not in skippers:
            t0, cpu0 = time.monotonic(), time.process_time()
            with pytest.raises(FluxliteTimeoutError) as info:
                _call(tp, kind, tag, expect_peer, timeout_s=TIMEOUT_S, op="test op", step=tag, epoch=i + 3)
            elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
            assert TIMEOUT_S * 0.99 <= elapsed <= TIMEOUT_S + SLACK_S, f"{tag}: raised after {elapsed:.2f} s"
            assert cpu < 0.2 * TIMEOUT_S, f"{tag}: the wait burnt {cpu:.2f} s of CPU"  # ranks share cores
            e = info.value
            got = dict(op=e.op, rank=e.rank, peer=e.peer, step=e.step, epoch=e.epoch, timeout_s=e.timeout_s)
            want = dict(op="test op", rank=rank, peer=expect_peer, step=tag, epoch=i + 3, timeout_s=TIMEOUT_S)
            assert got == want, f"{tag}: {got} != {want}"
            assert f"peer rank {expect_peer} at step '{tag}'" in str(e), str(e)
        # Every rank leaves the scenario together; the skippers have waited here all along.
        raw.set(f"{tag}-done-{rank}", "")
        raw.wait([f"{tag}-done-{r}" for r in range(W)], timedelta(seconds=60))


def _agree_then_miss(rank: int, W: int, scenarios: list[tuple[str, set[int], int]]) -> None:
    _agree(rank, W)
    _missing_peer(rank, W, scenarios)


# One spawn per world size does both halves: a spawn alone costs 4-6 s on 2 cores.
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "W, scenarios",
    [
        (2, [("barrier", {1}, 1), ("broadcast_str", {0}, 0)]),
        # Rank 0 waits on both 1 and 2 and names the lowest.
        (3, [("barrier", {0}, 0), ("all_gather_int", {1, 2}, 1), ("broadcast_str", {2}, 2)]),
    ],
)
def test_collectives_agree_and_a_missing_peer_is_named_within_the_timeout(W: int, scenarios) -> None:
    run_ranks(_agree_then_miss, W, scenarios)


@pytest.mark.timeout(10)
def test_single_rank_needs_no_store_and_arguments_are_checked() -> None:
    tp = TPGroup(group=None, rank=0, world_size=1, device_types=frozenset())  # no process group at all
    rendezvous.barrier(tp, "k", **GENEROUS)
    assert rendezvous.broadcast_str(tp, "k", "only", **GENEROUS) == "only"
    assert rendezvous.all_gather_int(tp, "k", 5, **GENEROUS) == [5]
    with pytest.raises(ValueError, match="src must be a rank"):
        rendezvous.broadcast_str(tp, "k", "x", src=1, **GENEROUS)
    with pytest.raises(TypeError, match="must be a str"):
        rendezvous.broadcast_str(tp, "k", None, **GENEROUS)
    with pytest.raises(TypeError):
        rendezvous.all_gather_int(tp, "k", 2.5, **GENEROUS)


@pytest.mark.parametrize("backend,devices,gloo_cuda", [
    ("gloo", {"cpu": "gloo"}, False),
    ("nccl", {"cuda": "nccl"}, False),
    ("cpu:gloo,cuda:nccl", {"cpu": "gloo", "cuda": "nccl"}, False),
    ("cpu:gloo,cuda:gloo", {"cpu": "gloo", "cuda": "gloo"}, True),  # fluxlite.init's ranks sharing a GPU
    ("ucc", {}, False),
])
def test_the_backend_serving_each_device_is_read_from_the_group(monkeypatch, backend, devices, gloo_cuda):
    """What a group's backend string says serves each device type, and whether gloo serves CUDA
    tensors (then the layers' eager all-gathers avoid torch's functional one, which crashes there)."""
    from fluxlite import group as g

    monkeypatch.setattr(g.dist, "get_backend", lambda group: backend)
    assert g._backends(object()) == devices
    assert (g._backends(object()).get("cuda") == "gloo") is gloo_cuda


def _resolved_by_name(rank: int, W: int) -> None:
    tp = resolve_group()
    assert resolve_group() is tp and resolve_group(dist.group.WORLD) is tp  # cached
    assert (tp.rank, tp.world_size, tp.device_types, tp.gloo_serves_cuda) == (rank, W, frozenset({"cpu"}), False)
    sub = dist.new_group(list(range(W)))
    assert resolve_group(sub).group is sub and resolve_group(sub) is not tp
    # A new default group after destroy_process_group may reuse the old one's name: the cache must
    # not hand back the old TPGroup (its group is gone).
    name = tp.name
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=W)
    fresh = resolve_group()
    assert fresh.group is dist.group.WORLD and fresh is not tp, (name, fresh.name)
    dist.barrier()


def test_groups_resolve_once_per_group_and_never_to_a_destroyed_one():
    run_ranks(_resolved_by_name, 2)


def test_a_free_local_port_lies_below_the_ephemeral_range_and_can_be_listened_on() -> None:
    """Ranks spawned by the profiler, the demo and the tests listen on a port drawn below the range
    from which outgoing connections take theirs, so none can take it before rank 0 listens."""
    import socket

    from fluxlite.group import free_local_port

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except OSError:
        pytest.skip("no /proc port range on this system")
    ports = {free_local_port() for _ in range(20)}
    assert all(min(low, 32768) // 2 <= p < min(low, 32768) for p in ports), sorted(ports)
    assert len(ports) > 1, "the same port every time"
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))
        s.listen()
