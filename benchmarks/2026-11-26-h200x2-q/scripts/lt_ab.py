"""Interleaved rounds: torch.matmul, cuBLASLt without a workspace (beta 0, and with C), on the consumers' split GEMMs."""
import statistics, torch
from fluxlite._cublaslt import addmm_into


def ms(fn, iters=20):
    torch.cuda.synchronize(); torch.cuda._sleep(1_000_000)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1000


for M, K, N in ((2048, 14336, 8192), (4096, 14336, 4096), (2048, 28672, 8192), (4096, 8192, 8192), (2048, 4096, 8192), (4096, 3072, 4096), (8192, 8192, 7168)):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
    c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns = dict(torch=lambda: torch.matmul(a, w.t(), out=d), lt0=lambda: addmm_into(d, None, a, w, 1.0),
               ltc=lambda: addmm_into(d, c, a, w, 1.0), addmm=lambda: torch.addmm(c, a, w.t(), out=d))
    for f in fns.values():
        f(); f()
    res = {k: [] for k in fns}
    for r in range(9):
        names = list(fns)[r % 4:] + list(fns)[:r % 4]
        for k in names:
            res[k].append(ms(fns[k]))
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{M}x{K}->{N}: " + "  ".join(f"{k} {v:.1f}" for k, v in med.items()) + f"  lt0/torch {med['lt0']/med['torch']:.3f}  ltc/addmm {med['ltc']/med['addmm']:.3f}")
