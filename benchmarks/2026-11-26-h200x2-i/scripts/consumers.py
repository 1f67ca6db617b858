"""GEMM-RS / GEMM-AllReduce (two shots) fused: the matmul consumer against the Triton kernel (default
config), interleaved with cuBLAS, the overlap limit and matmul + NCCL (torchrun, 2 GPUs)."""
import os, sys, json
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite
from fluxlite.timing import Timer, time_rounds
from fluxlite.profile.limit import limit_case
from fluxlite.dispatch import Choice
from fluxlite.kernels.gemm_core import GemmConfig
from fluxlite.ops.gemm_rs import RS
from fluxlite.ops.gemm_ar import AR
import fluxlite.ops.gemm_ar as G

tp = fluxlite.init()
rank, W = dist.get_rank(), tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
rounds = int(os.environ.get("ROUNDS", 5))
G.ONE_SHOT_MAX_BYTES = 0  # ar: two shots
res = {}
for spec in sys.argv[1].split():
    op, dims = spec.split(":")
    M, K, N = (int(v) for v in dims.split(","))
    OP = RS if op == "rs" else AR
    g = torch.Generator(device="cuda").manual_seed(5 + rank)
    rows_out = M // W if op == "rs" else M
    inputs = [dict(a=torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16),
                   w=(torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16),
                   o=torch.empty(rows_out, N, device="cuda", dtype=torch.bfloat16),
                   full=torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]

    def gemm(x):
        return torch.matmul(x["a"], x["w"].t(), out=x["full"])

    def seq(x):
        if op == "rs":
            torch.matmul(x["a"], x["w"].t(), out=x["full"])
            dist.reduce_scatter_tensor(x["o"], x["full"], group=tp.group)
        else:
            torch.matmul(x["a"], x["w"].t(), out=x["o"])
            dist.all_reduce(x["o"], group=tp.group)
        return x["o"]

    def by(config, timeout):
        def f(x):
            args = OP.check(x["a"], x["w"], None, group=tp.group, impl="fused", timeout=timeout, out=x["o"], scale=None)
            return OP.run(Choice("fused", config), args)
        return f

    fns = {"cublas": gemm, "seq": seq, "matmul": by(None, 12.0), "triton": by(GemmConfig(), 13.0)}
    x = inputs[0]
    ref = x["a"].double() @ x["w"].double().t()
    dist.all_reduce(ref, group=tp.group)
    if op == "rs":
        ref = ref[rank * (M // W): (rank + 1) * (M // W)]
    errs = {}
    for name in ("matmul", "triton"):
        for _ in range(3):
            x["o"].fill_(float("nan"))
            y = fns[name](x)
        torch.cuda.synchronize()
        errs[name] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    limit, _, transfer = limit_case(tp, "gemm_rs" if op == "rs" else "gemm_ar", M, K, N, torch.bfloat16, dev, gemm, 60.0)
    fns["limit"] = limit
    times, _ = time_rounds(Timer(tp, dev), fns, inputs, rounds=rounds, warmup=3)
    transfer.close()
    if rank == 0:
        t = {n: times[n]["throughput"] for n in fns}
        l = {n: times[n]["latency"] for n in fns}
        h = {n: times[n]["host"] for n in fns}
        print(f"{op} {M}x{K}->{N}: cublas {t['cublas']:.3f} ms | tp/limit " + " ".join(f"{n} {t[n]/t['limit']:.3f}" for n in fns)
              + " | tp/seq " + " ".join(f"{n} {t[n]/t['seq']:.3f}" for n in ("matmul", "triton"))
              + " | lat/seq " + " ".join(f"{n} {l[n]/l['seq']:.3f}" for n in ("matmul", "triton"))
              + " | host us " + " ".join(f"{n} {h[n]*1e3:.0f}" for n in fns)
              + " | err " + " ".join(f"{k} {v:.1e}" for k, v in errs.items()), flush=True)
    res[spec] = dict(times=times, errs=errs)
    del inputs
    fluxlite.release_workspaces()
if rank == 0 and os.environ.get("OUT"):
    json.dump(res, open(os.path.join(os.environ["OUT"], f"consumers_{os.getpid()}.json"), "w"), indent=1)
dist.destroy_process_group()
