"""Variant: the matmul consumer's peer-chunk GEMMs store straight into the peer's recv (its symmetric
data half, mapped here), so the producer only signals: no copy-engine copy, no local partial.
REMOTE_SPLITS sets the splits per chunk (default: as committed)."""
import os

from fluxlite import schedule as sch
from fluxlite.fused.producer import SIGNAL, WAIT
from fluxlite.ops import gemm_rs
from fluxlite.ops.gemm_rs import GemmReduceScatter


class _PeerTargets:
    """partial[chunk, rows] -> the peer `chunk`'s recv[rank] rows (its memory)."""

    def __init__(self, views):
        self.views = views

    def __getitem__(self, key):
        chunk, rows = key
        return self.views[chunk][rows]


def install():
    if os.environ.get("REMOTE_SPLITS"):
        gemm_rs.MATMUL_SPLITS = int(os.environ["REMOTE_SPLITS"])
    base = GemmReduceScatter._consume_by_matmul

    def consume(self, call, args, partial, recv, reduced, second):
        if not (call.ws.is_cuda or os.environ.get('REMOTE_CPU')):
            return base(self, call, args, partial, recv, reduced, second)
        ws = call.ws
        W, r = ws.world_size, ws.rank
        _, mc, N = partial.shape
        views = [ws.data(d, call.parity, (W, mc, N), partial.dtype)[r] if d != r else None for d in range(W)]
        return base(self, call, args, _PeerTargets(views), recv, reduced, second)

    def steps(self, call, partial):
        if not (call.ws.is_cuda or os.environ.get('REMOTE_CPU')):
            return base_steps(self, call, partial)
        ws, plan = call.ws, call.plan
        W, r = ws.world_size, ws.rank
        counters = call.state.counters.data_ptr()
        out = []
        for d in plan.sched.peers():
            for s, _ in enumerate(plan.split_rows):
                out += [(WAIT, counters + 4 * sch.counter_slot(d, s), plan.sched.split_tiles(s, plan.num_n),
                         dict(what="local partial tiles", peer=r, chunk=d, split=s)),
                        (SIGNAL, call.flag_addr(d, sch.data_slot(W, r, s)), sch.SET)]
        return out

    base_steps = GemmReduceScatter.steps
    GemmReduceScatter._consume_by_matmul = consume
    GemmReduceScatter.steps = steps
