"""Host us of the repeat look-up (Op._repeat) of a repeated auto call against a named one, CPU ranks."""
import os, sys, time, statistics
sys.path.insert(0, os.getcwd())
import torch
import fluxlite
from fluxlite import dispatch, ops
from fluxlite.profile.run import init_ranks
tp, device = init_ranks("gloo")
a, w = torch.randn(8, 16), torch.randn(24, 16)
key = dispatch.Key.of("gemm_rs", tp, a, w, 8)
seq = dispatch.Choice("sequential", source="cache")
dispatch._MEMORY[key] = dispatch.Choices.of(seq, seq, seq)
for impl in ("auto", "sequential"):
    for _ in range(3):
        fluxlite.gemm_rs(a, w, impl=impl)
op = ops.RS
options = {**op.option_defaults}
res = {}
for impl in ("auto", "sequential") * 3:
    ts = []
    for r in range(21):
        t0 = time.perf_counter()
        for _ in range(2000):
            k, rep, known = op._repeat(None, None, impl, {**op.option_defaults}, (a, w, None, None))
        ts.append((time.perf_counter() - t0) / 2000 * 1e6)
    assert rep is not None
    res.setdefault(impl, []).append(statistics.median(ts))
if tp.rank == 0:
    print({k: [round(x, 3) for x in v] for k, v in res.items()})
