"""Host cost of a repeated impl='auto' call over the forced call it runs, on two CPU ranks, with the
op's fused and sequential bodies stubbed (after real calls) to return a preallocated output.

    python benchmarks/2026-11-26-h200x2-m/scripts/repeat_host.py          # in a loop, one mode
    python benchmarks/2026-11-26-h200x2-m/scripts/repeat_host.py modes    # modes alternating, choices differing
(from the repository root)."""
import statistics
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402
from tests.dist_utils import run_ranks  # noqa: E402


def body(rank, W, alternate):
    import fluxlite
    from fluxlite import dispatch, ops
    tp = fluxlite.group.resolve_group(None)
    M, K, N = 64, 64, 128
    a, w = torch.randn(M, K // W), torch.randn(N, K // W)
    out, out_seq = torch.empty(M // W, N), torch.empty(M // W, N)
    fused, seq = dispatch.Choice("fused", source="cache"), dispatch.Choice("sequential", source="cache")
    key = dispatch.Key.of("gemm_rs", tp, a, w, M)
    dispatch._MEMORY[key] = dispatch.Choices.of(seq, fused, seq) if alternate else dispatch.Choices.same(fused)
    for mode in ("throughput", "latency") * 2:  # real calls first: plans, repeats
        with dispatch.assume_mode(mode):
            fluxlite.gemm_rs(a, w, impl="auto", out=out)
            fluxlite.gemm_rs(a, w, impl="fused", out=out)
    ops.RS.fused = lambda state, plan, args: out
    ops.RS.sequential = lambda args: out_seq
    call = {impl: (lambda impl=impl: fluxlite.gemm_rs(a, w, impl=impl, out=out_seq if impl == "sequential" else out))
            for impl in ("fused", "auto", "sequential")}
    res = {}
    if not alternate:
        for _ in range(15):
            for impl, f in call.items():
                t = time.perf_counter()
                for _ in range(500):
                    f()
                res.setdefault(impl, []).append((time.perf_counter() - t) / 500)
    else:
        for _ in range(2000):
            with dispatch.assume_mode("throughput"):
                call["auto"]()
            with dispatch.assume_mode("latency"):
                for name, impl in (("auto after a switch", "auto"), ("auto", "auto"), ("fused", "fused")):
                    t = time.perf_counter()
                    call[impl]()
                    res.setdefault(name, []).append(time.perf_counter() - t)
    if rank == 0:
        print({n: round(statistics.median(v) * 1e6, 2) for n, v in res.items()}, "us", flush=True)


if __name__ == "__main__":
    run_ranks(body, 2, "modes" in sys.argv[1:], timeout_s=120)
