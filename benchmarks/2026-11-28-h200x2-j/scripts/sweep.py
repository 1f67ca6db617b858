"""linear_into at rows off 16 bytes across M: unpadded cuBLAS, the rule's choice, forced padding (ms)."""
import torch
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


real = S.pads_rows
for K, N in ((3001, 2000), (4096, 2001), (8192, 3500), (5000, 3500), (13227, 6639)):
    w = (torch.randn(N, K, device=dev) / K**0.5).to(torch.bfloat16)
    for M in (16, 64, 128, 256, 512, 1024, 2048, 4096):
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        un = t(lambda: S._gemm_into(out, x, w, None, 1.0))
        rule = t(lambda: S.linear_into(out, x, w, None))
        S.pads_rows = lambda a, b: True
        forced = t(lambda: S.linear_into(out, x, w, None))
        S.pads_rows = real
        print(f"K={K} N={N} M={M}: unpadded {un:.4f} rule({'pad' if real(x, w) else 'as is'}) {rule:.4f} "
              f"padded {forced:.4f}  padded/unpadded {forced / un:.3f}", flush=True)
