"""One GPU: the matmul consumers' GEMM (fluxlite._cublaslt.linear_into) with and without a bias, at
sub-GEMM shapes of AG-GEMM and GEMM-RS at TP=2; the heuristic's first candidates' tiles with and
without the bias epilogue; torch.addmm with the bias beside them. Median of 7 rounds of 30 calls."""
import statistics as st, ctypes, torch
from fluxlite import _cublaslt as lt
L = lt._library()
def tiles(M, N, K, biased):
    # the plan's candidates for a [M,K]@[N,K].T GEMM, both alignments 256
    key = (14, M, N, K, K, True, K, N, N, (256,) * 4, False, biased)
    handle = lt._handles.get(0)
    plan = lt._plan(L, 0, key)
    desc, layouts = plan[1], list(plan[2:6])
    algos = lt._candidates(L, plan[0], desc, layouts, (256,) * 4)
    return [lt._tile(L, a) for a in algos]
def timeit(fn, n=30):
    for _ in range(3): fn()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): fn()
    e.record(); e.synchronize(); return s.elapsed_time(e) / n * 1000
shapes = [(4096, 5000, 7000), (2048, 5000, 7000), (3000, 7000, 10000), (4096, 8192, 3584), (8192, 8192, 7168),
          (4096, 8192, 7168), (2048, 4096, 8192), (4096, 4096, 8192), (4096, 14336, 8192), (2048, 4968, 7832),
          (4096, 4968, 7832), (4096, 8192, 28672), (2048, 8192, 10240), (1024, 8192, 8192)]
print("M K N | tiles plain | tiles biased | plain us | biased us | biased/plain | torch addmm bias/plain mm")
for M, K, N in shapes:
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ok = lt.addmm_into(out, None, a, w, 1.0, False, b)
    ref = torch.addmm(b.float(), a.float(), w.float().t())
    err = ((out.float() - ref).norm() / ref.norm()).item()
    cases = {"plain": lambda: lt.linear_into(out, a, w, None), "biased": lambda: lt.linear_into(out, a, w, b),
             "addmm": lambda: torch.addmm(b, a, w.t()), "mm": lambda: torch.mm(a, w.t())}
    t = {k: [] for k in cases}
    for _ in range(7):
        for k, f in cases.items():
            t[k].append(timeit(f))
    m = {k: st.median(v) for k, v in t.items()}
    print(f"{M} {K} {N} | {tiles(M, N, K, False)} | {tiles(M, N, K, True)} | {m['plain']:.1f} | {m['biased']:.1f} | "
          f"{m['biased']/m['plain']:.3f} | {m['addmm']/m['mm']:.3f} (ok {ok}, err {err:.1e})", flush=True)
