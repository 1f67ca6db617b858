"""GEMM-only: full torch.matmul vs cuBLASLt without workspace, whole and cut in row parts.
    python3 benchmarks/2026-11-28-h200x2-e/scripts/gemmdiag.py M,K,N ..."""
import sys, statistics, torch
from fluxlite import _cublaslt as lt
torch.manual_seed(0)
dev = torch.device("cuda")
def t(fn, reps=20, rounds=7):
    fn(); torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        for _ in range(reps): fn()
        e.record(); e.synchronize()
        res.append(s.elapsed_time(e) / reps)
    return statistics.median(res)
print(f"{'M x K -> N':>22} {'mm':>7} {'lt':>6} {'lt/2':>6} {'lt/2r':>6} {'mm/2':>6} {'lt/4':>6} {'mm/4':>6} (ratios to mm)")
for s in sys.argv[1:]:
    M, K, N = map(int, s.split(","))
    a = torch.randn(M, K, device=dev).bfloat16(); w = torch.randn(N, K, device=dev).bfloat16() / K**.5
    out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    def parts(n, f):
        step = M // n
        def go():
            for i in range(n): f(out[i*step:(i+1)*step], a[i*step:(i+1)*step])
        return go
    mm = lambda o, x: torch.matmul(x, w.t(), out=o)
    ltf = lambda o, x: lt.linear_into(o, x, w, None)
    ltr = lambda o, x: lt.linear_into(o, x, w, None, rows_256=True)
    base = t(parts(1, mm))
    r = [t(parts(1, ltf)), t(parts(2, ltf)), t(parts(2, ltr)), t(parts(2, mm)), t(parts(4, ltf)), t(parts(4, mm))]
    print(f"{s:>22} {base:7.3f} " + " ".join(f"{x/base:6.3f}" for x in r), flush=True)
