"""Kineto traces of bench_layers' step per mode (rank 0's GPU), and where the step's time goes:
GEMM kernels' busy time (union over streams), NCCL's, fluxlite's Triton kernels', copies', the rest.
torchrun --nproc-per-node 2 trace_layers.py OUTDIR --block mlp --modes megatron,fused,sequential"""
import functools, json, os, sys
import torch, torch.distributed as dist
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import bench_layers as bl
import fluxlite

out_dir = sys.argv[1]
a = bl.parse_args(sys.argv[2:])
tp = fluxlite.init(None)
W, rank = tp.world_size, tp.rank
device = torch.device("cuda", torch.cuda.current_device())
dtype = torch.bfloat16
modes = a.modes.split(",")
blocks = bl.Blocks(a, W, dtype, device, "megatron" in modes)
g = torch.Generator(device=device).manual_seed(1 + rank)
x = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g).requires_grad_()
grad = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g)
STEPS = 3

def cat(name):
    n = name.lower()
    if "nccl" in n: return "nccl"
    if any(k in n for k in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "sm80_")) and "triton" not in n: return "gemm"
    if "triton" in n or n.startswith(("_", "kernel")): return "triton"
    return "other"

def union(iv):
    iv = sorted(iv); tot = 0; cur = None
    for s, e in iv:
        if cur is None or s > cur[1]:
            if cur: tot += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    if cur: tot += cur[1] - cur[0]
    return tot

summary = {}
for rep, m in [(i, m) for i in range(int(os.environ.get('REPEAT', '1'))) for m in modes]:
    block = blocks.configure(m)
    for _ in range(5):
        bl.step(block, x, grad)
    torch.cuda.synchronize(); dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            bl.step(block, x, grad)
        torch.cuda.synchronize()
    dist.barrier()
    if rank == 0:
        path = f"{out_dir}/trace_{a.block}_{m}_{rep}.json"
        prof.export_chrome_trace(path)
        ev = json.load(open(path))["traceEvents"]
        ks = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("dur")]
        t0 = min(e["ts"] for e in ks); t1 = max(e["ts"] + e["dur"] for e in ks)
        by = {}
        for e in ks:
            c = "copy" if e["cat"] != "kernel" else cat(e["name"])
            by.setdefault(c, []).append((e["ts"], e["ts"] + e["dur"]))
        res = dict(wall_ms=(t1 - t0) / 1e3 / STEPS)
        for c, iv in by.items():
            res[c + "_busy_ms"] = union(iv) / 1e3 / STEPS
            res[c + "_sum_ms"] = sum(e - s for s, e in iv) / 1e3 / STEPS
        res["gemm_or_other_busy_ms"] = union(by.get("gemm", []) + by.get("other", []) + by.get("triton", [])) / 1e3 / STEPS
        # per-name totals of the top kernels
        names = {}
        for e in ks:
            names[e["name"][:90]] = names.get(e["name"][:90], 0) + e["dur"] / 1e3 / STEPS
        res["top"] = sorted(names.items(), key=lambda kv: -kv[1])[:25]
        streams = {}
        for e in ks:
            streams.setdefault(str(e.get("args", {}).get("stream")), []).append((e["ts"], e["ts"] + e["dur"]))
        res["stream_busy_ms"] = {s: union(iv) / 1e3 / STEPS for s, iv in streams.items()}
        summary[f'{m}_{rep}'] = res
        print(m, rep, json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items() if k != "top"}), flush=True)
        for n, t in res["top"]:
            print(f"   {t:8.3f} ms  {n}", flush=True)
if rank == 0:
    json.dump(summary, open(f"{out_dir}/trace_summary_{a.block}.json", "w"), indent=1)
fluxlite.release_workspaces()
dist.destroy_process_group()
