"""Copy-engine bandwidth between the ranks of one host: per-peer pushes and pulls, serial on one
stream or one stream per peer; and the GEMM-RS at W ranks as the fused op runs it, for reference."""
import os, sys, torch, torch.distributed as dist
from fluxlite.group import resolve_group
from fluxlite.workspace import SymmetricWorkspace
from fluxlite import _cuda_driver as cu

dist.init_process_group("nccl")
r, W = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(r); dev = torch.device("cuda", r)
cu.ensure_context(r)
tp = resolve_group()
MB = int(os.environ.get("MB", "32"))
per = MB << 20
ws = SymmetricWorkspace(tp, dev, "bw", 30.0)
ws.reserve(W * per, timeout_s=30)
local = torch.empty(W * per, dtype=torch.uint8, device=dev)
streams = [torch.cuda.Stream(device=dev, priority=-1) for _ in range(W)]
peers = [(r + i) % W for i in range(1, W)]

def enqueue(mode, nstreams):
    main = torch.cuda.current_stream()
    for s in streams[:nstreams]:
        s.wait_stream(main)
    for i, p in enumerate(peers):
        s = streams[i % nstreams]
        if mode == "pull":  # p's slot r -> our local slot p
            cu.memcpy_async(s.cuda_stream, local.data_ptr() + p * per, ws.data_addr(p, 0) + r * per, per)
        else:  # our slot -> p's slot r
            cu.memcpy_async(s.cuda_stream, ws.data_addr(p, 1) + r * per, local.data_ptr() + p * per, per)
    for s in streams[:nstreams]:
        main.wait_stream(s)

res = {}
for mode in ("pull", "push"):
    for ns in sorted({1, W - 1}):
        for _ in range(3):
            enqueue(mode, ns)
        torch.cuda.synchronize(); dist.barrier()
        ts = []
        for _ in range(15):
            dist.barrier(); torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); enqueue(mode, ns); e1.record(); e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort(); t = ts[len(ts) // 2]
        tt = torch.tensor([t], device=dev); dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        res[(mode, ns)] = tt.item()
if r == 0:
    for (mode, ns), t in res.items():
        print(f"W={W} {mode} {MB} MiB to each of {W-1} peers on {ns} stream(s): {t*1e3:.0f} us, "
              f"{(W-1)*per/t/1e6:.0f} GB/s out of each GPU", flush=True)
ws.close(); dist.destroy_process_group()
