"""Cut GEMMs on one stream vs alternating over two streams (tails overlap), with one-warp spin kernels
standing in for the bounded split waits, against one full GEMM.
    python3 benchmarks/2026-11-28-h200x2-e/scripts/twostream.py M,K,N ..."""
import sys, statistics, torch, triton, triton.language as tl
from fluxlite import _cublaslt as L
dev = torch.device("cuda")
s2 = torch.cuda.Stream()
@triton.jit
def spin_kernel(x_ptr, ns):
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,l", [tl.zeros([32], tl.int64)], dtype=tl.int64, is_pure=False, pack=1)
    t0 = tl.max(t0, 0)
    t = t0
    while t - t0 < ns:
        t = tl.max(tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,l", [tl.zeros([32], tl.int64)], dtype=tl.int64, is_pure=False, pack=1), 0)
    tl.store(x_ptr + tl.arange(0, 32), tl.zeros([32], tl.int32))
buf = torch.zeros(32, dtype=torch.int32, device=dev)
def spin(ns): spin_kernel[(1,)](buf, ns, num_warps=1)
def t(fn, reps=20, rounds=7):
    fn(); torch.cuda.synchronize(); res = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
        for _ in range(reps): fn()
        e.record(); e.synchronize(); res.append(s.elapsed_time(e) / reps)
    return statistics.median(res)
print("ratios to torch full: lt full | AG 2 on 1 (spin 0) | AG 2 on 2 (spin 0) | AG 2 on 2 (spin 100us) | RS 4 on 1 | RS 4 on 2 (spins 0)")
for s in sys.argv[1:]:
    M, K, N = map(int, s.split(","))
    a = torch.randn(M, K, device=dev).bfloat16(); w = torch.randn(N, K, device=dev).bfloat16() / K**.5
    out = torch.empty(M, N, device=dev, dtype=torch.bfloat16); c = torch.randn(M, N, device=dev).bfloat16()
    def ag(two, ns):
        h = M // 2
        def go():
            main = torch.cuda.current_stream(); s2.wait_stream(main)
            L.linear_into(out[:h], a[:h], w, None)
            with torch.cuda.stream(s2 if two else main):
                spin(ns); L.linear_into(out[h:], a[h:], w, None)
            main.wait_stream(s2)
        return go
    def rs(two):
        q = M // 4
        def go():
            main = torch.cuda.current_stream(); s2.wait_stream(main)
            for i in range(4):
                lo, hi = i * q, (i + 1) * q
                with torch.cuda.stream(s2 if two and i % 2 else main):
                    if i >= 2:
                        spin(0); L.addmm_into(out[lo:hi], c[lo:hi], a[lo:hi], w, 1.0, True)
                    else:
                        L.linear_into(out[lo:hi], a[lo:hi], w, None, rows_256=True)
            main.wait_stream(s2)
        return go
    base = t(lambda: torch.matmul(a, w.t(), out=out))
    full = t(lambda: L.linear_into(out, a, w, None))
    r = [full, t(ag(False, 0)), t(ag(True, 0)), t(ag(True, 100000)), t(rs(False)), t(rs(True))]
    print(f"{s:>18} {base:7.3f} ms | " + " | ".join(f"{x/base:.3f}" for x in r), flush=True)
