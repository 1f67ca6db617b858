"""Fused calls with a bias, the bias in cuBLASLt's epilogue (new) against torch's addmm for biased
GEMMs (old, by patching fluxlite._cublaslt.linear_into; a bias tensor of its own so that the eager
replays are captured apart), TP=2: AG-GEMM plain, bias, bias+GELU; GEMM-RS plain, bias; sequential
alike. Throughput: 20 calls back to back, median of 5 rounds, the cases interleaved."""
import statistics as st, torch, torch.distributed as dist
import fluxlite
from fluxlite import _cublaslt as lt
from fluxlite._sequential import linear_into as torch_linear_into
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
new_linear = lt.linear_into
def old_linear(out, x, weight, bias, alpha=1.0, rows_256=False):
    if bias is None and lt.addmm_into(out, None, x, weight, alpha, rows_256):
        return out
    return torch_linear_into(out, x, weight, bias, alpha)
def timeit(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); dist.barrier()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record()
    for _ in range(n): fn()
    e.record(); e.synchronize(); return s.elapsed_time(e) / n
for op, M, K, n in (("ag", 8192, 5000, 7000), ("ag", 6000, 7000, 10000), ("ag", 8192, 8192, 3584), ("ag", 16384, 8192, 7168),
                    ("rs", 8192, 4096, 8192), ("rs", 16384, 14336, 8192), ("rs", 8192, 4968, 7832)):
    rows = M // 2 if op == "ag" else M
    a = torch.randn(rows, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, K, device="cuda") / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda").to(torch.bfloat16); b_old = b.clone()
    f = fluxlite.ag_gemm if op == "ag" else fluxlite.gemm_rs
    cases = {"fused plain": (False, lambda: f(a, w, impl="fused")),
             "fused bias": (False, lambda: f(a, w, b, impl="fused")),
             "fused bias old": (True, lambda: f(a, w, b_old, impl="fused")),
             "seq plain": (False, lambda: f(a, w, impl="sequential")),
             "seq bias": (False, lambda: f(a, w, b, impl="sequential"))}
    if op == "ag":
        cases["fused gelu"] = (False, lambda: f(a, w, b, impl="fused", activation="gelu"))
        cases["fused gelu old"] = (True, lambda: f(a, w, b_old, impl="fused", activation="gelu"))
        cases["seq gelu"] = (False, lambda: f(a, w, b, impl="sequential", activation="gelu"))
    # correctness of the new path against the old one
    lt.linear_into = new_linear
    x_new = cases["fused bias"][1]().float()
    lt.linear_into = old_linear
    x_old = cases["fused bias old"][1]().float()
    lt.linear_into = new_linear
    diff = ((x_new - x_old).norm() / x_old.norm()).item()
    times = {k: [] for k in cases}
    for _ in range(5):
        for k, (old, fn) in cases.items():
            lt.linear_into = old_linear if old else new_linear
            times[k].append(timeit(fn))
    lt.linear_into = new_linear
    med = {k: st.median(v) for k, v in times.items()}
    if r == 0:
        print(f"{op} {M}x{K}->{n} (new vs old rel diff {diff:.1e}): " + ", ".join(f"{k} {t:.3f}" for k, t in med.items())
              + f" | bias new/old {med['fused bias']/med['fused bias old']:.3f}, bias/plain new {med['fused bias']/med['fused plain']:.3f} old {med['fused bias old']/med['fused plain']:.3f}"
              + (f", gelu new/old {med['fused gelu']/med['fused gelu old']:.3f}, gelu fused/seq {med['fused gelu']/med['seq gelu']:.3f}" if op == "ag" else ""), flush=True)
dist.destroy_process_group()
