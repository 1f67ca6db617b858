import torch, random
from fluxlite.kernels import repitch

def t(fn, n=30):
    """Device time per call, the calls queued behind a sleep (host time hidden)."""
    for _ in range(3): fn()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize(); torch.cuda._sleep(30_000_000); s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n * 1000

def torch_pad(x, rows, cols):
    R, C = x.shape; y = x.new_empty((R + rows, C + cols)); y[:R, :C].copy_(x)
    if cols: y[:R, C:].zero_()
    if rows: y[R:].zero_()
    return y

cache = {}
rng = random.Random(49)
shapes = [(14634, 11037, 1804), (8192, 4099, 3001), (15646, 13227, 6639), (12000, 4100, 6001), (10900, 9104, 8589), (4096, 8190, 3001),
          (2048, 4099, 1001), (512, 3001, 5000), (256, 8191, 2047), (64, 5001, 7000)]
shapes += [(rng.randrange(64, 16384), rng.randrange(1000, 16000), rng.randrange(500, 12000)) for _ in range(6)]
print("us; pad a [M,K]->[M,K+64pad] | pad w [N,K]->[Np,Kp] | crop [M/2,Np]->[M/2,N]: torch, repitch, ratio")
for (M, K, N) in shapes:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    Kp, Np = K + -K % 64, N + -N % 8
    row = []
    for name, src, shape in (("pad a", a, (M, Kp)), ("pad w", w, (Np, Kp))):
        dst = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        tt = t(lambda: torch_pad(src, shape[0] - src.shape[0], shape[1] - src.shape[1]))
        tr = t(lambda: repitch.launch(src, dst, cache))
        dst.fill_(float("nan")); repitch.launch(src, dst, cache)
        ok = torch.equal(dst, torch_pad(src, shape[0] - src.shape[0], shape[1] - src.shape[1]))
        row.append(f"{name} {tt:7.1f} {tr:7.1f} {tr / tt:5.2f}{'' if ok else ' WRONG'}")
    wide = torch.randn(max(1, M // 2), Np, device="cuda", dtype=torch.bfloat16); out = torch.empty(max(1, M // 2), N, device="cuda", dtype=torch.bfloat16)
    tt = t(lambda: out.copy_(wide[:, :N])); tr = t(lambda: repitch.launch(wide[:, :N], out, cache))
    out.fill_(float("nan")); repitch.launch(wide[:, :N], out, cache); ok = torch.equal(out, wide[:, :N])
    row.append(f"crop {tt:7.1f} {tr:7.1f} {tr / tt:5.2f}{'' if ok else ' WRONG'}")
    print(f"{M:5d}x{K:5d}->{N:5d}: " + " | ".join(row), flush=True)
