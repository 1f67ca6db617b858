"""Bandwidth of one-shot reduction kernels: every rank sums its partial and its peer's (read over NVLink
through symmetric memory), no flags (a barrier before each timed batch). torchrun, 2 GPUs.
Variants: 'rows' (the kernel's current tiling: one row x 4096 columns, 8 warps, one program per SM) and
'flat' (contiguous blocks of M*N, unmasked full blocks, a masked tail) over BLOCK, warps, programs/SM.
Also the copy engine pulling the peer's partial, then a local add."""
import os, sys, statistics
import torch, torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import triton, triton.language as tl

dist.init_process_group("nccl")
rank, W = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
SMS = torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def rows_kernel(p0, p1, out, M, N, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    row_len = N // VEC * VEC
    cb = tl.cdiv(row_len, BLOCK_N)
    for tile in range(tl.program_id(0), M * cb, tl.num_programs(0)):
        offs_n = (tile % cb) * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = offs_n < row_len
        at = (tile // cb).to(tl.int64) * row_len + offs_n
        acc = tl.load(p0 + at, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        acc += tl.load(p1 + at, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        tl.store(out + at, acc.to(out.dtype.element_ty), mask=ok)


@triton.jit
def flat_kernel(p0, p1, out, total, BLOCK: tl.constexpr):
    full = total // BLOCK
    for tile in range(tl.program_id(0), full, tl.num_programs(0)):
        at = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.load(p0 + at, cache_modifier=".cg").to(tl.float32)
        acc += tl.load(p1 + at, cache_modifier=".cg").to(tl.float32)
        tl.store(out + at, acc.to(out.dtype.element_ty))
    if tl.program_id(0) == tl.num_programs(0) - 1:
        at = full.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = at < total
        acc = tl.load(p0 + at, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        acc += tl.load(p1 + at, mask=ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        tl.store(out + at, acc.to(out.dtype.element_ty), mask=ok)


@triton.jit
def add_kernel(a, b, out, total, BLOCK: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(total, BLOCK), tl.num_programs(0)):
        at = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = at < total
        acc = tl.load(a + at, mask=ok, other=0.0).to(tl.float32) + tl.load(b + at, mask=ok, other=0.0).to(tl.float32)
        tl.store(out + at, acc.to(out.dtype.element_ty), mask=ok)


def bench(f, n=20, reps=7):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); dist.barrier()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            f()
        e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / n * 1e3)
    t = torch.tensor([statistics.median(ts)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[1].split()]
biggest = max(M * N for M, N in shapes)
buf = symm_mem.empty(biggest, device="cuda", dtype=torch.bfloat16)
hdl = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
peer_buf = hdl.get_buffer(1 - rank, (biggest,), torch.bfloat16)
for M, N in shapes:
    total = M * N
    mine = buf[:total]
    mine.copy_(torch.randn(total, device="cuda").to(torch.bfloat16))
    theirs = peer_buf[:total]
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    local = torch.empty(total, device="cuda", dtype=torch.bfloat16)
    dist.barrier(); torch.cuda.synchronize()
    p0, p1 = (mine, theirs) if rank == 0 else (theirs, mine)
    ref = (p0.float() + p1.float()).to(torch.bfloat16).view(M, N)
    vec = 8 if N % 8 == 0 else 1
    fns = {"rows": lambda: rows_kernel[(min(SMS, M * triton.cdiv(N, 4096)),)](p0, p1, out, M, N, BLOCK_N=4096, VEC=vec, num_warps=8)}
    for block in (2048, 4096, 8192):
        for warps in (4, 8, 16):
            if block // (32 * warps) < 8:
                continue
            for per_sm in (1, 2, 4):
                grid = max(1, min(per_sm * SMS, triton.cdiv(total, block)))
                fns[f"flat b{block} w{warps} x{per_sm}"] = (lambda grid=grid, block=block, warps=warps:
                    flat_kernel[(grid,)](p0, p1, out, total, BLOCK=block, num_warps=warps))
    def ce():
        local.copy_(theirs)
        add_kernel[(min(SMS * 2, triton.cdiv(total, 4096)),)](mine, local, out, total, BLOCK=4096, num_warps=8)
    fns["ce copy + add"] = ce
    fns["ce copy alone"] = lambda: local.copy_(theirs)
    res = {}
    for name, f in fns.items():
        out.fill_(float("nan")); f(); torch.cuda.synchronize()
        ok = name == "ce copy alone" or torch.equal(out, ref)
        res[name] = (bench(f), ok)
    if rank == 0:
        mib = total * 2 / 2**20
        best = sorted(res.items(), key=lambda kv: kv[1][0])
        print(f"== {M}x{N} ({mib:.2f} MiB): " + "; ".join(f"{n} {t:.1f} us ({mib / 1024 / (t * 1e-6):.0f} GiB/s){'' if ok else ' WRONG'}"
                                                       for n, (t, ok) in best), flush=True)
    dist.barrier()
dist.destroy_process_group()
