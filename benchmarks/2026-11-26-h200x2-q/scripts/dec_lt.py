"""torch.matmul against cuBLASLt without a workspace at decode and prefill sizes: us per call and kernels."""
import torch
from fluxlite._cublaslt import addmm_into
from torch.profiler import profile, ProfilerActivity


def ms(fn, iters=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize(); torch.cuda._sleep(2_000_000)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1000


def kern(fn):
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize()
    return [e.name[:40] for e in p.events() if e.device_type.name == "CUDA"]


for M in (1, 16, 64, 256, 1024, 4096):
    for K, N in ((4096, 4096), (14336, 8192), (8192, 8192), (3584, 5120)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
        d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        t1 = ms(lambda: torch.matmul(a, w.t(), out=d))
        ok = addmm_into(d, None, a, w, 1.0)
        t2 = ms(lambda: addmm_into(d, None, a, w, 1.0)) if ok else float("nan")
        print(f"{M}x{K}->{N}: torch {t1:.1f} us {kern(lambda: torch.matmul(a, w.t(), out=d))} | lt {t2:.1f} us {kern(lambda: addmm_into(d, None, a, w, 1.0)) if ok else 'refused'} | lt/torch {t2/t1:.3f}")
