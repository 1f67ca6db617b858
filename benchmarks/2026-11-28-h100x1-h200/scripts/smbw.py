"""SM-driven NVLink bandwidth at W ranks (push: our rows -> each peer's slot; pull-sum: every peer's
slot r summed into local), against the copy engine; and a cuBLAS GEMM's time beside each."""
import os, torch, torch.distributed as dist, triton, triton.language as tl
from fluxlite.group import resolve_group
from fluxlite.workspace import SymmetricWorkspace
from fluxlite import _cuda_driver as cu

@triton.jit
def push_kernel(bases_ptr, src_ptr, rank, W, per_elems, BLOCK: tl.constexpr):
    pid, P = tl.program_id(0), tl.num_programs(0)
    nblk = per_elems // BLOCK
    for i in range(1, W):
        d = (rank + i) % W
        dst = tl.multiple_of(tl.load(bases_ptr + d).to(tl.pointer_type(tl.int32)), 16) + rank * per_elems
        src = src_ptr + d * per_elems
        for b in range(pid, nblk, P):
            offs = b * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs))

@triton.jit
def pullsum_kernel(bases_ptr, out_ptr, rank, W, per_elems, BLOCK: tl.constexpr):
    pid, P = tl.program_id(0), tl.num_programs(0)
    nblk = per_elems // BLOCK
    for b in range(pid, nblk, P):
        offs = b * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in range(1, W):
            d = (rank + i) % W
            src = tl.multiple_of(tl.load(bases_ptr + d).to(tl.pointer_type(tl.bfloat16)), 16) + rank * per_elems
            acc += tl.load(src + offs).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16))

dist.init_process_group("nccl")
r, W = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(r); dev = torch.device("cuda", r)
cu.ensure_context(r)
tp = resolve_group()
MB = int(os.environ.get("MB", "32"))
per = MB << 20
ws = SymmetricWorkspace(tp, dev, "smbw", 30.0)
ws.reserve(W * per, timeout_s=30)
local = torch.randn(W * per // 2, device=dev).to(torch.bfloat16)
out = torch.empty(per // 2, dtype=torch.bfloat16, device=dev)
bases = torch.tensor([ws.data_addr(p, 0) for p in range(W)], dtype=torch.int64, device=dev)
side = torch.cuda.Stream(device=dev, priority=-1)
peers = [(r + i) % W for i in range(1, W)]
Mg, Kg, Ng = int(os.environ.get("GM", "2048")), int(os.environ.get("GK", "2048")), int(os.environ.get("GN", "8192"))
A = torch.randn(Mg * 4, Kg, device=dev, dtype=torch.bfloat16); B = torch.randn(Ng, Kg, device=dev, dtype=torch.bfloat16)

def ce_push():
    for p in peers:
        cu.memcpy_async(torch.cuda.current_stream().cuda_stream, ws.data_addr(p, 1) + r * per, local.data_ptr() + p * per, per)

def sm_push(P):
    return lambda: push_kernel[(P,)](bases, local.view(torch.int32), r, W, per // 4, BLOCK=2048, num_warps=8)

def sm_pullsum(P):
    return lambda: pullsum_kernel[(P,)](bases, out, r, W, per // 2, BLOCK=2048, num_warps=8)

def gemm():
    torch.matmul(A, B.t())

def timed(fn_main, fn_side=None, reps=10):
    # returns (total ms, side-only ms); all ranks in step
    for _ in range(2):
        fn_main() if fn_main else None
        if fn_side: fn_side()
    torch.cuda.synchronize(); dist.barrier()
    ts = []
    for _ in range(reps):
        dist.barrier(); torch.cuda.synchronize()
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        main = torch.cuda.current_stream()
        e0.record()
        if fn_side:
            side.wait_stream(main)
            with torch.cuda.stream(side):
                fn_side(); e2.record()
        if fn_main: fn_main()
        if fn_side: main.wait_stream(side)
        e1.record(); e1.synchronize()
        ts.append((e0.elapsed_time(e1), e0.elapsed_time(e2) if fn_side else 0.0))
    ts.sort(); t = torch.tensor(ts[len(ts) // 2], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()

def report(name, t, nbytes):
    if r == 0:
        print(f"W={W} {name}: {t[0]*1e3:.0f} us" + (f", {nbytes/t[0]/1e6:.0f} GB/s" if nbytes else "")
              + (f" (side done at {t[1]*1e3:.0f} us)" if t[1] else ""), flush=True)

out_bytes = (W - 1) * per
report("CE push", timed(ce_push), out_bytes)
for P in (8, 16, 32, 66, 132):
    report(f"SM push P={P}", timed(sm_push(P)), out_bytes)
    report(f"SM pull-sum P={P}", timed(sm_pullsum(P)), out_bytes)
tg = timed(gemm)
report(f"GEMM {Mg*4}x{Kg}->{Ng} alone", tg, 0)
report("GEMM + CE push beside", timed(gemm, ce_push), 0)
for P in (8, 16, 32):
    report(f"GEMM + SM push P={P} beside", timed(gemm, sm_push(P)), 0)
    report(f"GEMM + SM pull-sum P={P} beside", timed(gemm, sm_pullsum(P)), 0)
ws.close(); dist.destroy_process_group()
