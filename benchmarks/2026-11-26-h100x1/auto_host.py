"""Host time of auto's latency choice (fused with a named config) against a forced fused call, 2 ranks
sharing one GPU (FLUXLITE_GPU_SHARE=1). FLUXLITE_GPU_SHARE=1 PYTHONPATH=$PWD python benchmarks/2026-11-26-h100x1/auto_host.py"""
import os, sys, time, statistics, cProfile, pstats, io
sys.path.insert(0, os.getcwd())
import torch
from tests.gpu_utils import run_gpu_ranks


def body(rank, W):
    import torch.distributed as dist
    import fluxlite
    from fluxlite import dispatch
    from fluxlite.dispatch import Choice, Choices, GPU_CONFIGS
    dev = torch.device("cuda", torch.cuda.current_device())
    for op, M, K, N in (("gemm_rs", 1024, 4096, 8192), ("ag_gemm", 2048, 4096, 11008)):
        g = torch.Generator(device=dev).manual_seed(rank)
        rows = M if op == "gemm_rs" else M // W
        a = torch.randn(rows, K, device=dev, generator=g).bfloat16()
        w = (torch.randn(N, K, device=dev, generator=g) / K**0.5).bfloat16()
        fn = getattr(fluxlite, op)
        fn(a, w)  # auto: agree and measure
        torch.cuda.synchronize()
        key = dispatch.Key.of_size(op, W, a, w, M)
        if rank == 0:
            print(op, "measured:", dispatch.describe_modes(key), flush=True)
        g16 = next(c for c in GPU_CONFIGS if c.group_m == 16 and c.num_stages == 3)
        for name, choices in (("named config", Choices.of(Choice("sequential"), Choice("fused", g16), Choice("sequential"))),
                              ("default config", Choices.of(Choice("sequential"), Choice("fused"), Choice("sequential")))):
            dispatch._MEMORY[key] = choices
            res = {}
            for label, call in (("forced fused", lambda: fn(a, w, impl="fused")), ("auto, latency", lambda: fn(a, w))):
                ts = []
                for i in range(40):
                    torch.cuda.synchronize(); dist.barrier()
                    with dispatch.assume_mode("latency"):
                        t0 = time.perf_counter(); call(); t1 = time.perf_counter()
                    ts.append((t1 - t0) * 1e6)
                res[label] = statistics.median(ts[10:])
            if rank == 0:
                print(op, name, {k: round(v, 1) for k, v in res.items()}, flush=True)
            if name == "named config" and rank == 0:
                pr = cProfile.Profile()
                with dispatch.assume_mode("latency"):
                    pr.enable()
                    for _ in range(20):
                        fn(a, w)
                    pr.disable()
                s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(22)
                print(s.getvalue()[-4000:], flush=True)
            elif name == "named config":
                with dispatch.assume_mode("latency"):
                    for _ in range(20):
                        fn(a, w)
            torch.cuda.synchronize(); dist.barrier()


if __name__ == "__main__":
    run_gpu_ranks(body, 2, limit_s=150)
