"""Host cost of a repeated auto call that the rule decides (CPU ranks: no measuring) against the named
call it runs, at W=2 and 4, the op's implementation replaced by a no-op so that only the call path
is timed: median of 7 batches of 2000 calls, after 200; each rank prints its own.
    PYTHONPATH=$PWD python benchmarks/2026-11-28-h200x4-b/scripts/host_auto_rule.py"""
import os, time, statistics, torch, torch.distributed as dist, fluxlite
from tests.dist_utils import run_ranks
def body(rank, W):
    from fluxlite.ops import AG, RS
    for op, name in ((AG, "ag"), (RS, "rs")):
        cls = type(op)
        outs = {}
        orig = cls.sequential
        cls.sequential = (lambda self, args: (args.out, None)) if name == "ag" else (lambda self, args: args.out)
        a = torch.randn(8, 16); w = torch.randn(12, 16)
        out = torch.empty(8 * W if name == "ag" else 8 // W, 12)
        f = fluxlite.ag_gemm if name == "ag" else fluxlite.gemm_rs
        res = {}
        for impl in ("sequential", "auto", "sequential", "auto"):
            for _ in range(200):
                f(a, w, impl=impl, out=out)
            ts = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(2000):
                    f(a, w, impl=impl, out=out)
                ts.append((time.perf_counter() - t0) / 2000 * 1e6)
            res.setdefault(impl, []).append(statistics.median(ts))
        cls.sequential = orig
        print(f"W={W} rank {rank} {name}: " + " ".join(f"{k} {min(v):.2f} us" for k, v in res.items()), flush=True)
if __name__ == "__main__":
    os.environ["FLUXLITE_AUTO"] = "off"
    for W in (2, 4):
        run_ranks(body, W)
