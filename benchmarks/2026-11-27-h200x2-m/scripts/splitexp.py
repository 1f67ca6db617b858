"""GEMM-AllReduce two-shot: matmul-consumer split weights, interleaved in one process.
Variants are keyed by split count: 2 uniform (current), 3 = 4:3:1, 4 = 8:4:2:1, 5 = 16:8:4:2:1 (chunk
rows cut by the weights, whole row blocks). Plans for each variant are built once and swapped into the
state's plan cache. Per shape: rounds of (each variant: warm-up, throughput = 10 calls queued behind a
sleep / 10, latency = barrier+sync, one call, sync, wall x5 median). Prints medians, max over ranks."""
import os, sys, time, statistics, json
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
import fluxlite
sch = sys.modules["fluxlite.schedule"]
grs = sys.modules["fluxlite.ops.gemm_rs"]
from fluxlite.fused.state import states_of
from fluxlite.ops import AR

TABLE = {3: (4, 3, 1), 4: (8, 4, 2, 1), 5: (16, 8, 4, 2, 1)}
orig = sch.split_span
def span(split, blocks, splits):
    w = TABLE.get(splits)
    if w is None or blocks < sum(w):
        return orig(split, blocks, splits)
    cum = [0]
    for x in w:
        cum.append(cum[-1] + x)
    return range(cum[split] * blocks // cum[-1], cum[split + 1] * blocks // cum[-1])
sch.split_span = span
VARIANTS = [int(v) for v in os.environ.get("VARIANTS", "2,3,4,5").split(",")]
SH = [tuple(int(v) for v in s.split("x")) for s in os.environ["SH"].split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "7"))

tp = fluxlite.init(); W, rank = tp.world_size, tp.rank
CUDA = torch.cuda.is_available()
dev = torch.device("cuda", torch.cuda.current_device()) if CUDA else torch.device("cpu")
DT = torch.bfloat16 if CUDA else torch.float32
res = {}
for M, K, N in SH:
    torch.manual_seed(rank * 7 + M)
    a = torch.randn(M, K, device=dev, dtype=DT) / K ** 0.25
    wt = torch.randn(N, K, device=dev, dtype=DT) / K ** 0.25
    ref = (a.float() @ wt.float().t()); dist.all_reduce(ref)
    out = torch.empty(M, N, device=dev, dtype=DT)
    call = lambda: fluxlite.gemm_ar(a, wt, impl="fused", out=out)
    plans = {}
    key = None
    for v in VARIANTS:
        grs.MATMUL_SPLITS = v
        sch.build.cache_clear(); sch._tile_order.cache_clear()
        sts = states_of(tp.group)
        if key is not None:
            del sts[0].plans[key]
        before = set(sts[0].plans) if sts else set()
        AR.repeats.clear()
        out.fill_(float("nan"))
        call(); CUDA and torch.cuda.synchronize()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        st = states_of(tp.group)[0]
        new = [k for k in st.plans if k not in before]
        assert len(new) == 1, (new, list(st.plans))
        key = new[0]
        plans[v] = st.plans[key]
        assert err < 2e-2, (v, err)
        if rank == 0:
            print(M, K, N, "variant", v, "splits", plans[v].split_rows, plans[v].consumer, f"err {err:.2e}", flush=True)
    grs.MATMUL_SPLITS = 2
    if not CUDA:
        continue
    seqf = lambda: (torch.matmul(a, wt.t(), out=out), dist.all_reduce(out))
    tput = {v: [] for v in VARIANTS + ["seq"]}; lat = {v: [] for v in VARIANTS + ["seq"]}
    for r in range(ROUNDS):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)] + ["seq"]
        for v in order:
            if v != "seq":
                st.plans[key] = plans[v]; AR.repeats.clear()
            f = seqf if v == "seq" else call
            for _ in range(3):
                f()
            torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(20_000_000)
            e0.record()
            for _ in range(10):
                f()
            e1.record(); torch.cuda.synchronize()
            tput[v].append(e0.elapsed_time(e1) / 10)
            ls = []
            for _ in range(5):
                dist.barrier(); torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize()
                ls.append((time.perf_counter() - t) * 1e3)
            lat[v].append(statistics.median(ls))
    if v != "seq":
        pass
    st.plans[key] = plans[2]
    med = torch.tensor([[statistics.median(tput[v]) for v in VARIANTS + ["seq"]],
                        [statistics.median(lat[v]) for v in VARIANTS + ["seq"]]], device=dev)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    med = med.tolist()
    res[f"{M}x{K}x{N}"] = dict(variants=VARIANTS, throughput=med[0], latency=med[1],
                               rounds_tp={str(k): v for k, v in tput.items()})
    if rank == 0:
        base_t, base_l = med[0][0], med[1][0]
        print(f"{M}x{K}->{N}  tp ms " + " ".join(f"{v}:{t:.3f}({t/base_t:.3f})" for v, t in zip(VARIANTS + ['seq'], med[0])), flush=True)
        print(f"{M}x{K}->{N}  lat ms " + " ".join(f"{v}:{t:.3f}({t/base_l:.3f})" for v, t in zip(VARIANTS + ['seq'], med[1])), flush=True)
if rank == 0:
    json.dump(res, open(os.path.join(os.environ.get("R", "."), os.environ.get("OUTJ", "splitexp.json")), "w"), indent=1)
fluxlite.release_workspaces(); dist.destroy_process_group()
