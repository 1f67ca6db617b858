"""Two CUDA ranks: every op at every impl with an empty dimension, against float64, outputs NaN first."""
import os, torch, torch.distributed as dist, fluxlite
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r); dev = torch.device("cuda", r)
W = dist.get_world_size(); ok = 0
def ref_ag(a, w): g = [torch.empty_like(a) for _ in range(W)]; dist.all_gather(g, a); return torch.cat(g).double() @ w.double().t()
for impl in ("sequential", "decomposed", "fused", "auto"):
    for (M, K, N) in ((0, 64, 64), (32, 0, 64), (32, 64, 0), (0, 0, 0)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16); w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        for name, fn in (("ag", fluxlite.ag_gemm), ("rs", fluxlite.gemm_rs), ("ar", fluxlite.gemm_ar)):
            full = a.double() @ w.double().t(); s = full.clone(); dist.all_reduce(s)
            want = {"ag": None, "rs": s[r * (M // W):(r + 1) * (M // W)], "ar": s}[name]
            if name == "ag":
                want = ref_ag(a, w)
            out = torch.full(want.shape, float("nan"), device=dev, dtype=torch.bfloat16)
            got = fn(a, w, impl=impl, out=out)
            assert got.shape == want.shape, (name, impl, M, K, N, got.shape, want.shape)
            torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
            ok += 1
torch.cuda.synchronize(); print(f"rank {r}: {ok} empty calls right"); dist.destroy_process_group()
