import torch, triton
import triton.language as tl
@triton.jit
def elem(src, dst, rows, cols, sp, dp, ct, BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    r = (pid // ct) * BR + tl.arange(0, BR); c = (pid % ct) * BC + tl.arange(0, BC)
    r64 = r.to(tl.int64)[:, None]; m = (r[:, None] < rows) & (c[None, :] < cols)
    tl.store(dst + r64 * dp + c[None, :], tl.load(src + r64 * (sp * 8) + c[None, :], mask=m), mask=m)
def crop_elem(src, dst):
    R, C = dst.shape; ct = triton.cdiv(C, 128)
    elem[(triton.cdiv(R, 64) * ct,)](src, dst, R, C, src.stride(0) // 8, C, ct, BR=64, BC=128, num_warps=4)

from fluxlite.kernels import repitch
from fluxlite._sequential import zero_padded

def t(fn, n=20):
    for _ in range(3): fn()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n

def run(src, dst, br, bw, nw):
    (R, C), (Rd, Cd) = src.shape, dst.shape
    bits = 8 * src.element_size(); E = 32 // bits; wpr = triton.cdiv(Cd, E)
    repitch.repitch_kernel[(triton.cdiv(Rd, br) * triton.cdiv(wpr, bw),)](src, dst, R, C, src.stride(0), Rd, Cd, wpr, dst.numel() % E,
                                                         BITS=bits, WHOLE_ROWS=Cd % E == 0, BLOCK_R=br, BLOCK_W=bw, num_warps=nw)

cfgs = [(4, 256, 4), (2, 512, 4), (8, 256, 4), (4, 512, 8), (1, 1024, 4), (16, 64, 4), (8, 128, 4)]
def line(name, ref_fn, src, dst, check):
    res = [f"torch {t(ref_fn):.3f}"]
    for (br, bw, nw) in cfgs:
        res.append(f"{br}x{bw}w{nw} {t(lambda: run(src, dst, br, bw, nw)):.3f}")
    dst.fill_(float('nan')); run(src, dst, 8, 256, 4)
    print(f"  {name}: {' | '.join(res)} ok={torch.equal(dst, check)}", flush=True)

for (M, K, N) in [(14634, 11037, 1804), (8192, 4099, 3001), (15646, 13227, 6639), (12000, 4100, 6001), (10900, 9104, 8589), (4096, 8190, 3001)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    Kp = K + -K % 64
    ap = torch.empty(M, Kp, device="cuda", dtype=torch.bfloat16)
    contig = torch.empty_like(a); cc = t(lambda: contig.copy_(a))
    print(f"{M}x{K}->{N}: contiguous copy of a {cc:.3f} ms = {4 * M * K / cc / 1e9:.2f} TB/s", flush=True)
    line("pad a", lambda: zero_padded(a, 0, Kp - K), a, ap, zero_padded(a, 0, Kp - K))
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16); Np = N + -N % 8
    wp = torch.empty(Np, Kp, device="cuda", dtype=torch.bfloat16)
    line("pad w (N and K)", lambda: zero_padded(w, Np - N, Kp - K), w, wp, zero_padded(w, Np - N, Kp - K))
    wide = torch.randn(M // 2, Np, device="cuda", dtype=torch.bfloat16); out = torch.empty(M // 2, N, device="cuda", dtype=torch.bfloat16)
    line("crop", lambda: out.copy_(wide[:, :N]), wide[:, :N], out, wide[:, :N].contiguous())
    print(f"  crop by elements 64x128: {t(lambda: crop_elem(wide, out)):.3f}", flush=True)
