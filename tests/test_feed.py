"""The matmul consumer's producer feed (fluxlite.fused.producer.Feed) in one hardware queue per GPU.

With ``CUDA_DEVICE_MAX_CONNECTIONS=1`` every stream of a GPU feeds one in-order queue: an operation
that waits (a stream wait on a counter, a launch behind a wait kernel on its stream) holds back all
that was enqueued after it. The matmul consumer enqueues GEMMs, counter writes and bounded waits on
the peers' partials; the producer's waits, copies and signals go on another stream. This simulates
W ranks, each with one such queue, running the consumer's launches and the producer's steps in the
order the host enqueues them (the consumer's calls as :meth:`GemmReduceScatter._consume_by_matmul`
makes them), and checks that every rank finishes, and that enqueueing the whole producer after the
consumer would not.
"""

from __future__ import annotations

import pytest

from fluxlite.fused import producer
from fluxlite.fused.producer import COPY, SIGNAL, WAIT


def _rs_program(rank: int, W: int, splits: int, second: bool = False) -> list:
    """GEMM-RS's producer steps (:meth:`GemmReduceScatter.steps`) with symbolic addresses, and with
    ``second`` GEMM-AllReduce's second shot (:meth:`GemmAllReduce.second_shot`)."""
    steps = []
    peers = [(rank + i) % W for i in range(1, W)]
    for d in peers:
        for s in range(splits):
            steps += [(WAIT, ("counter", rank, d, s), 1, {}), (COPY, ("recv", d, rank, s), ("partial", rank, d, s), 1),
                      (SIGNAL, ("flag", d, rank, s), 1)]
    if second:  # every reduced split, then its flag on every peer (the copy out of theirs: the call's end)
        for s in range(splits):
            steps.append((WAIT, ("counter", rank, rank, s), 1, {}))
            steps += [(COPY, ("gathered", p, rank, s), ("out", rank, s), 1) for p in peers]
            steps += [(SIGNAL, ("reduced", p, rank, s), 1) for p in peers]
    return steps


def _enqueue_order(rank: int, W: int, splits: int, feed: bool, monkeypatch, second: bool = False) -> list:
    """The items of ``rank``'s queue in host order: ``("main", op, ...)`` and ``("side", step)``."""
    queue = []
    monkeypatch.setattr(producer, "stream_calls", lambda steps, *a: list(steps))
    monkeypatch.setattr(producer, "enqueue_on_stream",
                        lambda calls, stream, *a: queue.extend(("side", step) for step in calls))
    pieces = producer.pieces(_rs_program(rank, W, splits, second))
    f = producer.Feed(pieces, stream=0)
    for i in range(1, W):  # the consumer, as _consume_by_matmul enqueues it: peer chunks, then ours
        d = (rank + i) % W
        for s in range(splits):
            queue.append(("main", "gemm"))
            queue.append(("main", "count", ("counter", rank, d, s)))
            if feed:
                f.counted(("counter", rank, d, s), s)
    for s in range(splits):
        if feed:
            f.waiting(s)
        queue.append(("main", "wait", [("flag", rank, p, s) for p in range(W) if p != rank]))
        queue.append(("main", "gemm"))
        if second:
            queue.append(("main", "count", ("counter", rank, rank, s)))
            if feed:
                f.counted(("counter", rank, rank, s), s)
    queue.append(("main", "end"))  # the consumer is done
    queue.extend(("side", step) for step in (f.rest() if feed else [c for _, _, calls in pieces for c in calls]))
    if second:  # the call's end, on the consumer's stream (Call._enqueue): a wait for every peer's split, in order
        queue.extend(("main", "wait", [("reduced", rank, p, s) for p in range(W) if p != rank]) for s in range(splits))
    return queue


def _runs_to_the_end(queues: list[list]) -> bool:
    """Each rank's queue in order, an item holding back the rest until it can run; ``False`` if no
    rank can move and some are not done."""
    memory: set = set()
    heads = [0] * len(queues)
    while True:
        moved = False
        for r, queue in enumerate(queues):
            while heads[r] < len(queue):
                item = queue[heads[r]]
                if item[0] == "main":
                    if item[1] in ("count", "end"):
                        memory.add(item[2] if item[1] == "count" else ("end", r))
                    elif item[1] == "wait" and not all(flag in memory for flag in item[2]):
                        break
                else:
                    step = item[1]
                    if step[0] == WAIT and step[1] not in memory:
                        break
                    if step[0] == SIGNAL:
                        memory.add(step[1])
                heads[r] += 1
                moved = True
        if all(h == len(q) for h, q in zip(heads, queues)):
            return True
        if not moved:
            return False


@pytest.mark.parametrize("W", [2, 3, 4])
@pytest.mark.parametrize("splits", [1, 2])
@pytest.mark.parametrize("second", [False, True], ids=["gemm_rs", "gemm_ar"])
def test_the_feed_keeps_one_queue_per_gpu_moving(W, splits, second, monkeypatch):
    queues = [_enqueue_order(r, W, splits, True, monkeypatch, second) for r in range(W)]
    assert _runs_to_the_end(queues)
    # every producer step went out, once and in program order
    for r, queue in enumerate(queues):
        assert [item[1] for item in queue if item[0] == "side"] == _rs_program(r, W, splits, second)


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("second", [False, True], ids=["gemm_rs", "gemm_ar"])
def test_the_producer_after_the_whole_consumer_deadlocks_in_one_queue(W, second, monkeypatch):
    """What the feed is for: the consumer's first wait on a peer holds back the producer's copies."""
    queues = [_enqueue_order(r, W, 2, False, monkeypatch, second) for r in range(W)]
    assert not _runs_to_the_end(queues)


def test_signals_go_one_launch_after_their_copy(monkeypatch):
    """A signal waits for its copy; held back past the consumer's next GEMM, it lets that GEMM start
    while the copy runs."""
    queue = _enqueue_order(0, 2, 2, True, monkeypatch)
    kinds = [item[1] if item[0] == "main" else item[1][0] for item in queue]
    assert kinds == ["gemm", "count", WAIT, COPY, "gemm", "count", SIGNAL, WAIT, COPY,
                     "wait", "gemm", SIGNAL, "wait", "gemm", "end"]


def test_a_count_is_an_event_the_producer_waits_for(monkeypatch):
    """On CUDA a count records its counter's event on the consumer's stream, only where a producer
    step waits on it (GEMM-AllReduce's every reduced split, the last too; a counter that no step of
    the program waits on records nothing), and the producer stream waits for that event, then
    copies: no stream write or wait on the counter itself."""
    calls = []
    monkeypatch.setattr(producer.cu, "event_record", lambda event, stream: calls.append(("record", event, stream)))
    monkeypatch.setattr(producer.cu, "stream_wait_event", lambda stream, event: calls.append(("wait", stream, event)))
    monkeypatch.setattr(producer.cu, "memcpy_async", lambda stream, dst, src, n: calls.append(("copy", stream, dst)))
    monkeypatch.setattr(producer.cu, "stream_batch_mem_op", lambda stream, batch: calls.append(("memop", stream)))
    monkeypatch.setattr(producer.cu, "mem_op_batch", lambda ops: list(ops))
    W, splits, side, main = 2, 2, 11, 22
    ids: dict = {}  # symbolic address -> a distinct int, as the driver calls take
    steps = [(s[0], ids.setdefault(s[1], len(ids)), *s[2:]) if s[0] in (WAIT, COPY, SIGNAL) else s
             for s in _rs_program(0, W, splits, second=True)]
    counters = [s[1] for s in steps if s[0] == WAIT]
    assert ids[("counter", 0, 0, splits - 1)] in counters, "the last reduced split leaves from the producer too"
    unawaited = ids.setdefault(("counter", 0, 0, splits), len(ids))  # a count that no step waits on
    events = {address: 100 + i for i, address in enumerate(counters + [unawaited])}
    f = producer.Feed(producer.pieces(steps), side, main, events)
    for address in counters + [unawaited]:
        calls.clear()
        f.counted(address, 0)
        if address == unawaited:
            assert not any(c[0] == "record" for c in calls)
            continue
        assert calls[0] == ("record", events[address], main)
        assert ("wait", side, events[address]) in calls
        waited = calls.index(("wait", side, events[address]))
        assert calls[waited + 1][:2] == ("copy", side), "the copy goes right behind the wait"
        assert not any(c[0] == "memop" and c[1] == main for c in calls)
