"""Eager calls back to back (nothing queued ahead): auto whose choice is sequential against the named call."""
import os, statistics, sys, time, torch, torch.distributed as dist, fluxlite, cProfile, pstats, io
from fluxlite import dispatch
sys.path.insert(0, os.path.dirname(__file__))
from autohost import count_calls  # noqa  (re-runs nothing: guarded below)

def main():
    rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    M, K, N = [int(v) for v in sys.argv[1].split(",")]
    op = sys.argv[2]
    g = torch.Generator(device="cuda").manual_seed(rank)
    m = M // 2 if op == "ag" else M
    inputs = [torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
    f = {"ag": fluxlite.ag_gemm, "rs": fluxlite.gemm_rs, "ar": fluxlite.gemm_ar}[op]
    rows = m * 2 if op == "ag" else m
    outs = {impl: [torch.empty(rows // (2 if op == "rs" else 1), N, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for impl in ("sequential", "auto")}
    f(inputs[0], w, impl="auto", out=outs["auto"][0]); torch.cuda.synchronize()
    key = dispatch.Key.of({"ag": "ag_gemm", "rs": "gemm_rs", "ar": "gemm_ar"}[op], fluxlite.resolve_group(), inputs[0], w, M)
    if rank == 0: print("choices", dispatch.describe_modes(key))
    for mode in ("both", "latency", None, "both"):
        for impl in ("sequential", "auto"):
            ctx = dispatch.assume_mode(mode) if mode else contextlib_null()
            with ctx:
                for i in range(6): f(inputs[i % 3], w, impl=impl, out=outs[impl][i % 3])
                dist.barrier(); torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(60): f(inputs[i % 3], w, impl=impl, out=outs[impl][i % 3])
                torch.cuda.synchronize(); ms = (time.perf_counter() - t0) / 60 * 1e6
                c, names = count_calls(lambda: f(inputs[1], w, impl=impl, out=outs[impl][1]))
                torch.cuda.synchronize()
            if rank == 0: print(mode, impl, "eager us/call", round(ms, 1), "py calls", c)
    with dispatch.assume_mode("both"):
        pr = cProfile.Profile(); pr.enable()
        for i in range(60): f(inputs[i % 3], w, impl="auto", out=outs["auto"][i % 3])
        torch.cuda.synchronize(); pr.disable()
    if rank == 0:
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[:2500])
    dist.destroy_process_group()

import contextlib
def contextlib_null(): return contextlib.nullcontext()

if __name__ == "__main__":
    main()
