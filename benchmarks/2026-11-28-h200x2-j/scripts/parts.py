"""The padded GEMM's parts at rows off 16 bytes (ms): the weight's padding three ways, a's padding,
the padded GEMM, the output's copy, against the unpadded GEMM."""
import torch
import torch.nn.functional as F
from fluxlite import _sequential as S

dev = torch.device("cuda", 0)


def t(fn, iters=20, rounds=7):
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


def pad_empty(x, pk, pn):  # empty, copy in, zero only the padding
    R, C = x.shape
    y = x.new_empty(R + pn, C + pk)
    y[:R, :C].copy_(x)
    if pk:
        y[:, C:].zero_()
    if pn:
        y[R:].zero_()
    return y


up = lambda n: -(-n // 8) * 8
for K, N in ((3001, 2000), (4096, 2001), (8192, 3500), (5000, 3500), (13227, 6639), (4996, 7000), (8016, 7269)):
    w = (torch.randn(N, K, device=dev) / K**0.5).to(torch.bfloat16)
    pk, pn = up(K) - K, up(N) - N
    r = dict(wpad_F=t(lambda: F.pad(w, (0, pk, 0, pn))), wpad_zeros=t(lambda: w.new_zeros(N + pn, K + pk)[:N, :K].copy_(w)),
             wpad_empty=t(lambda: pad_empty(w, pk, pn)), wcopy_contig=t(lambda: w.clone()))
    print(f"K={K} N={N} weight {w.numel() * 2 / 1e6:.1f} MB: " + " ".join(f"{k}={v:.4f}" for k, v in r.items()), flush=True)
    wp = pad_empty(w, pk, pn)
    for M in (256, 512, 1024, 2048, 4096, 8192):
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        xp = pad_empty(x, pk, 0)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        wide = torch.empty(M, N + pn, device=dev, dtype=torch.bfloat16)
        q = dict(unpadded=t(lambda: S._gemm_into(out, x, w, None, 1.0)),
                 apad=t(lambda: pad_empty(x, pk, 0)) if pk else 0.0,
                 gemm=t(lambda: torch.matmul(xp, wp.t(), out=wide)),
                 copyout=t(lambda: out.copy_(wide[:, :N])) if pn else 0.0,
                 linear_into=t(lambda: S.linear_into(out, x, w, None)))
        print(f"  M={M} pads={S.pads_rows(x, w)}: " + " ".join(f"{k}={v:.4f}" for k, v in q.items()), flush=True)
