"""CPU check of the remote-store variant (gloo): torchrun --nproc-per-node W check_cpu.py"""
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote
remote.install()
import fluxlite
from fluxlite.ops.gemm_rs import GemmReduceScatter
used = []
_b = GemmReduceScatter.matmul_gemms
def spy(self, args, plan, partial, *a, **k):
    used.append(type(partial).__name__); return _b(self, args, plan, partial, *a, **k)
GemmReduceScatter.matmul_gemms = spy
dist.init_process_group("gloo")
r, W = dist.get_rank(), dist.get_world_size()
for it, (M, K, N) in enumerate([(W * 64, 40, 24), (W * 96, 72, 40), (W * 64, 40, 24), (W * 33, 24, 16)] * 2):
    g = torch.Generator().manual_seed(M * 7 + it)
    a = torch.randn(W, M, K, generator=g)
    w = torch.randn(W, N, K, generator=g)
    b = torch.randn(N, generator=g)
    for fn, ref in [(lambda: fluxlite.gemm_rs(a[r], w[r], b, impl="fused"), (sum(a[i].double() @ w[i].double().T for i in range(W)) + b.double())[r * (M // W):(r + 1) * (M // W)]),
                    (lambda: fluxlite.gemm_ar(a[r], w[r], b, impl="fused"), sum(a[i].double() @ w[i].double().T for i in range(W)) + b.double())]:
        out = fn()
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-5, (M, K, N, err)
print(f"rank {r}: ok, consumers used {sorted(set(used))} x{len(used)}", flush=True)
dist.destroy_process_group()
