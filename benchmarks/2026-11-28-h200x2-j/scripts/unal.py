"""GEMMs with rows off 16 bytes, one GPU: what each way of running them costs (ms, median of rounds)."""
import sys, torch, torch.nn.functional as F
from fluxlite import _cublaslt as lt

torch.manual_seed(0)
dev = torch.device("cuda", int(sys.argv[1]) if len(sys.argv) > 1 else 0)
torch.cuda.set_device(dev)
SHAPES = [(8192, 5000, 3500), (6144, 3000, 4500), (5104, 8016, 7269), (6144, 8192, 3500), (3072, 8192, 3500),
          (15646, 13227, 6639), (8192, 4996, 7000), (4096, 3001, 2000), (4096, 2048, 2001), (2048, 4096, 7000),
          (8192, 8192, 14336)]


def t(fn, iters=10, rounds=7):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        for _ in range(iters):
            fn()
        e.record(); e.synchronize()
        out.append(s.elapsed_time(e) / iters)
    return sorted(out)[rounds // 2]


up = lambda n: -(-n // 8) * 8
print("M,K,N | matmul lt | padded(limit) | ldNp lt +copy | padK(a,w)+lt | padK(a)+lt | copyout")
for M, K, N in SHAPES:
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(N, K, device=dev) / K**0.5).to(torch.bfloat16)
    Kp, Np = up(K), up(N)
    ap, wp = F.pad(a, (0, Kp - K)), F.pad(w, (0, Kp - K, 0, Np - N))
    out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    buf = torch.empty(M, Np, device=dev, dtype=torch.bfloat16)
    view = buf[:, :N]
    wpk = F.pad(w, (0, Kp - K))  # K padded, N as is
    ref = (a.float() @ w.float().t())
    r = {}
    r["matmul"] = t(lambda: torch.matmul(a, w.t(), out=out))
    r["lt"] = t(lambda: lt.linear_into(out, a, w, None))
    r["padded"] = t(lambda: torch.matmul(ap, wp.t(), out=buf))
    ok = lt.addmm_into(view, None, ap if K != Kp else a, wpk if K != Kp else w, 1.0)
    r["ld_lt"] = t(lambda: lt.addmm_into(view, None, ap if K != Kp else a, wpk if K != Kp else w, 1.0))
    r["ld_torch"] = t(lambda: torch.matmul(ap if K != Kp else a, (wpk if K != Kp else w).t(), out=view))
    r["copyout"] = t(lambda: out.copy_(view))
    def padk_full():
        a2, w2 = F.pad(a, (0, Kp - K)), F.pad(w, (0, Kp - K))
        lt.addmm_into(view, None, a2, w2, 1.0)
        out.copy_(view)
    def padk_a():
        a2 = F.pad(a, (0, Kp - K))
        lt.addmm_into(view, None, a2, wpk, 1.0)
        out.copy_(view)
    r["padK_aw"] = t(padk_full)
    r["padK_a"] = t(padk_a)
    padk_full(); torch.cuda.synchronize()
    err = float((out.float() - ref).norm() / ref.norm())
    g = 2 * M * K * N / 1e9
    print(f"{M},{K},{N} ok={ok} err={err:.1e} " + " ".join(f"{k}={v:.3f}" for k, v in r.items())
          + f" | TF matmul {g / r['matmul']:.0f} padded {g / r['padded']:.0f} ld_lt {g / r['ld_lt']:.0f}", flush=True)
    del a, w, ap, wp, out, buf, view, wpk, ref
