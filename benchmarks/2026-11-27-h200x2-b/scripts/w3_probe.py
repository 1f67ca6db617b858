"""One fused call of each op at W ranks (more ranks than GPUs: shared mode), each checked against
float32; errors printed per rank.   torchrun --standalone --nproc-per-node 3 w3_probe.py"""
import os, sys, traceback
sys.path.insert(0, os.getcwd())
import torch, torch.distributed as dist
import fluxlite

tp = fluxlite.init()
W, r = tp.world_size, tp.rank
dev = torch.device("cuda", torch.cuda.current_device())
print(f"rank {r} of {W} on cuda:{dev.index} ({torch.cuda.device_count()} visible)", flush=True)
bf = torch.bfloat16


def full(M, K, N, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    return torch.randn(M, K, device=dev, generator=g), torch.randn(N, K, device=dev, generator=g) / K ** .5


def check(name, fn):
    try:
        err = fn()
        print(f"rank {r} {name}: rel err {err:.2e} {'OK' if err < 2e-2 else 'BAD'}", flush=True)
    except Exception:
        print(f"rank {r} {name}: FAILED\n{traceback.format_exc()}", flush=True)
        raise


def ag(M, K, N):
    a, w = full(W * M, K, N, 1)
    out = fluxlite.ag_gemm(a[r * M:(r + 1) * M].to(bf), w.to(bf), impl="fused"); torch.cuda.synchronize()
    ref = a.to(bf).float() @ w.to(bf).float().t()
    return ((out.float() - ref).norm() / ref.norm()).item()


def rs(M, K, N):
    a, w = full(M, W * K, N, 2)
    out = fluxlite.gemm_rs(a[:, r * K:(r + 1) * K].to(bf), w[:, r * K:(r + 1) * K].to(bf), impl="fused"); torch.cuda.synchronize()
    ref = (a.to(bf).float() @ w.to(bf).float().t())[r * (M // W):(r + 1) * (M // W)]
    return ((out.float() - ref).norm() / ref.norm()).item()


def ar(M, K, N):
    a, w = full(M, W * K, N, 3)
    out = fluxlite.gemm_ar(a[:, r * K:(r + 1) * K].to(bf), w[:, r * K:(r + 1) * K].to(bf), impl="fused"); torch.cuda.synchronize()
    ref = a.to(bf).float() @ w.to(bf).float().t()
    return ((out.float() - ref).norm() / ref.norm()).item()


for name, fn in [("ag 3x256 K1024 N768", lambda: ag(256, 1024, 768)), ("rs 768 K1024 N768", lambda: rs(768, 1024, 768)),
                 ("ar one-shot 1x4096->4096", lambda: ar(1, 4096, 4096)), ("ar one-shot 64x1024->3000", lambda: ar(64, 1024, 3000)),
                 ("ar two-shot 3000x1024->3000", lambda: ar(3000, 1024, 3000))]:
    for i in range(2):
        check(f"{name} #{i}", fn)
    dist.barrier()
fluxlite.release_workspaces()
dist.destroy_process_group()
