"""GEMM-RS kernel alone (flags preset, peers' partials in place, rank 0 of 2): the claim kernel
(fluxlite/kernels/gemm_rs_claim.py, copied in) against the run kernel (fluxlite/kernels/gemm_rs.py),
the GEMM core and cuBLAS, interleaved rounds of 20 launches, medians of 11.
python benchmarks/2026-11-26-h200x2-f/rs_kernel_alone.py OUT.json (from the repository root)"""
import json, sys
import torch
sys.path.insert(0, "scripts")
from bench_overlap import preset_flags
from fluxlite import schedule as sch
from fluxlite.kernels import gemm_core as core, gemm_rs, gemm_rs_claim
from fluxlite.kernels import ag_gemm as agk
from fluxlite.epilogue import PLAIN
from fluxlite.ops.gemm_rs import RS


def case(M, K, N, W=2, rank=0):
    dev = torch.device("cuda")
    cfg = core.default_config()
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
    mc = M // W
    sched = RS.schedule(W, rank, M, cfg.block_m)
    num_n = core.column_blocks(N, cfg)
    blocks = sched.kernel_blocks(lambda c, s: sch.data_slot(W, 0, s) if c == rank else sch.counter_slot(c, s)).to(dev)
    local = sched.local_tiles(num_n)
    tiles = RS.tile_order(sched, num_n, cfg.group_m, core.sm_count(dev)).to(dev)
    nt = tiles.shape[0]
    sig = (3, M, K, N)
    flags = preset_flags(W, sig, dev)
    sigd = torch.tensor(sig, dtype=torch.int32, device=dev)
    error = torch.zeros(16, dtype=torch.int32, device=dev)
    call = torch.ones(1, dtype=torch.int32, device=dev)
    counters = torch.zeros(sch.num_counters(W), dtype=torch.int32, device=dev)
    recv = torch.randn(W, mc, N, device=dev, dtype=torch.bfloat16)
    kw = dict(a=a, weight=w, bias=None, recv=recv, blocks=blocks, tiles=tiles, peer_tiles=nt - local,
              flags=flags, sig=sigd, counters=counters, error=error, call=call, rank=rank, world_size=W,
              sig_base=sch.signature_slot(W, 0, 0), timeout_s=5.0, ep=PLAIN, config=cfg)
    res, outs, parts, counts = {}, {}, {}, {}
    for name, fn in (("claim", gemm_rs_claim.launch), ("runs", gemm_rs.launch)):
        o = torch.full((mc, N), float("nan"), device=dev, dtype=torch.bfloat16)
        p = torch.full((W, mc, N), float("nan"), device=dev, dtype=torch.bfloat16)
        outs[name], parts[name] = o, p
        cache = {}

        def run(fn=fn, o=o, p=p, cache=cache):
            counters.zero_()
            fn(out=o, partial=p, cache=cache, **kw)
        res[name] = run
    res["core"] = lambda: (counters.zero_(), agk.gemm(a, w, config=cfg))
    res["cublas"] = lambda: (counters.zero_(), torch.matmul(a, w.t()))
    for name in ("claim", "runs"):
        res[name]()
        torch.cuda.synchronize()
        counts[name] = counters[: sch.claim_slot(W)].tolist()
    ref = (a[rank * mc:(rank + 1) * mc].float() @ w.float().t()) + recv[1 - rank].float()
    pref = a[(1 - rank) * mc:(2 - rank) * mc].float() @ w.float().t()
    errs = {n: float((o.float() - ref).abs().max()) for n, o in outs.items()}
    perrs = {n: float((p[1 - rank].float() - pref).abs().max()) for n, p in parts.items()}
    names = list(res)
    times = {n: [] for n in names}
    for r in range(11):
        for n in names[r % len(names):] + names[:r % len(names)]:
            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            torch.cuda._sleep(1_000_000)
            s.record()
            for _ in range(20):
                res[n]()
            e.record(); torch.cuda.synchronize()
            times[n].append(s.elapsed_time(e) / 20)
    assert int(error[0]) == 0, error.tolist()
    out = {n: sorted(t)[len(t) // 2] for n, t in times.items()}
    out.update(max_err=errs, partial_err=perrs, counts_equal=counts["claim"] == counts["runs"])
    return out


if __name__ == "__main__":
    results = {}
    shapes = [(8192, 2048, 4096), (8192, 3072, 4096), (8192, 4096, 8192), (4096, 7168, 4096), (4096, 5120, 8192),
              (4096, 14336, 8192), (8192, 28672, 8192), (8192, 24576, 12288), (6000, 5000, 7000), (8192, 5000, 8192),
              (2048, 14336, 8192), (16384, 4096, 8192), (4096, 4000, 5000)]
    for shape in shapes:
        r = case(*shape)
        results["rs:%d,%d,%d" % shape] = r
        cb = r["cublas"]
        print("rs", shape, f"cublas={cb:.3f}ms", "  ".join(f"{k}={v / cb:.3f}" for k, v in r.items() if isinstance(v, float)),
              "err", r["max_err"], r["partial_err"], "counts_equal", r["counts_equal"], flush=True)
    json.dump(results, open(sys.argv[1], "w"), indent=1)
