"""main_grad accumulation: the fp32 product then an add, against cuBLAS's addmm into the fp32 buffer
in place; and the MLP block (fc1 Column, SiLU, fc2 Row; SP, fused) with gradient_accumulation_fusion
for the Column backward's gather by NCCL (parts=False) or the copy engines in parts."""
import os, statistics, sys, torch, torch.distributed as dist, torch.nn.functional as F
import fluxlite
import fluxlite.library as lib
import fluxlite.parallel.functions as fn
from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(rank); dist.init_process_group("nccl")
dev = torch.device("cuda", rank)
def ev_time(f, n=20, warm=3):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); dist.barrier(device_ids=[rank])
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
def tp_time(f, n=10, warm=3):
    for _ in range(warm): f()
    torch.cuda.synchronize(); dist.barrier(device_ids=[rank])
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(10_000_000); s.record()
    for _ in range(n): f()
    e.record(); e.synchronize(); return s.elapsed_time(e) / n

def acc_old(mg, g, x): mg.add_(torch.mm(g.t(), x, out_dtype=mg.dtype))
def acc_new(mg, g, x): torch.addmm(mg, g.t(), x, out_dtype=mg.dtype, out=mg)

# 1. the accumulate alone, fc1's and fc2's weight-grad shapes, whole and half the rows
for (T, O, I) in [(8192, 28672, 8192), (4096, 28672, 8192), (8192, 8192, 14336), (4096, 8192, 14336)]:
    g = torch.randn(T, O, device=dev, dtype=torch.bfloat16); x = torch.randn(T, I, device=dev, dtype=torch.bfloat16)
    mg0 = torch.randn(O, I, device=dev); a, b = mg0.clone(), mg0.clone()
    acc_old(a, g, x); acc_new(b, g, x)
    err = ((a - b).abs().max() / a.abs().max()).item()
    mg = mg0.clone()
    t_bf = ev_time(lambda: g.t() @ x); t_old = ev_time(lambda: acc_old(mg, g, x)); t_new = ev_time(lambda: acc_new(mg, g, x))
    if rank == 0:
        print(f"acc T={T} O={O} I={I}: bf16 mm {t_bf:.3f} ms, mm fp32+add {t_old:.3f}, addmm in place {t_new:.3f}  rel diff {err:.2e}", flush=True)
    del g, x, mg0, a, b, mg

# 2. the MLP block with main_grad
H, FFN, S, B = 8192, 28672, 4096, 2
cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.bfloat16, gradient_accumulation_fusion=True)
torch.manual_seed(0)
fc1 = ColumnParallelLinear(H, 2 * FFN, config=cfg, init_method=lambda w: torch.nn.init.normal_(w, std=0.02), bias=False, overlap="fused")
fc2 = RowParallelLinear(FFN, H, config=cfg, init_method=lambda w: torch.nn.init.normal_(w, std=0.002), bias=False,
                        input_is_parallel=True, skip_bias_add=False, overlap="fused")
for l in (fc1, fc2):
    l.weight.main_grad = torch.zeros(l.weight.shape, device=dev, dtype=torch.float32)
x = torch.randn(S // 2, B, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
up = torch.randn(S // 2, B, H, device=dev, dtype=torch.bfloat16)
def step():
    x.grad = None
    h, _ = fc1(x); gt, u = h.chunk(2, -1); y, _ = fc2(F.silu(gt) * u); y.backward(up)
RealRegather = lib.Regather
results = {}
for rnd in range(2):
    for name, parts, acc in [("nccl+mm_add", False, acc_old), ("parts+mm_add", True, acc_old),
                             ("parts+addmm", True, acc_new), ("nccl+addmm", False, acc_new)]:
        fn.Regather = lambda tp, impl, parts=True, _p=parts: RealRegather(tp, impl, parts=_p)
        fn._accumulate = acc
        for l in (fc1, fc2): l.weight.main_grad.zero_()
        step(); torch.cuda.synchronize()
        got = [l.weight.main_grad.clone() for l in (fc1, fc2)]
        if "REF" not in globals(): REF = got
        d = max(((a - r).abs().max() / r.abs().max()).item() for a, r in zip(got, REF))
        if rank == 0: print(f"{name}: main_grad rel diff vs first {d:.2e}", flush=True)
        lat = ev_time(step); thr = tp_time(step)
        results.setdefault(name, []).append((lat, thr))
        if rank == 0: print(f"mlp main_grad {name} round {rnd}: latency {lat:.3f} ms, throughput {thr:.3f} ms", flush=True)
if rank == 0:
    for k, v in results.items(): print("SUMMARY", k, " ".join(f"{a:.3f}/{b:.3f}" for a, b in v))
fluxlite.synchronize(); dist.destroy_process_group()
