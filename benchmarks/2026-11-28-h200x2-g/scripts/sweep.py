"""Small-call paths against their overlapped alternatives and sequential, TP=W, bf16, forced fused:
AG-GEMM rows pushed by the SMs then one cuBLAS GEMM ("new") vs the copy engine + overlapped consumer
("old"); GEMM-RS one shot ("new") vs the overlapped protocol ("old"). fluxlite.timing rounds
(throughput queued behind a sleep, latency aligned, host), medians of R rounds, max over ranks.
Each path's bound set per call (and each its own timeout: a repeated call keeps its first path).
    torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/sweep.py [ROUNDS] [ag,rs]"""
import importlib, sys, torch, torch.distributed as dist
import fluxlite
from fluxlite.profile.run import init_ranks
from fluxlite.timing import Timer, time_rounds
agm = importlib.import_module("fluxlite.ops.ag_gemm"); rsm = importlib.import_module("fluxlite.ops.gemm_rs")
tp, dev = init_ranks(torch_symm_mem=False)
W, r = tp.world_size, tp.rank
BIG = 1 << 40
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
which = sys.argv[2] if len(sys.argv) > 2 else "ag,rs"
AG0 = [(128, 8192, 28672), (192, 8192, 28672), (96, 8192, 28672), (128, 8192, 29568), (80, 5120, 27648), (128, 8192, 64128),
      (200, 4096, 14336), (240, 4096, 7680), (256, 8192, 28672), (256, 4096, 14336)]
RS0 = [(16, 7168, 8192), (64, 8192, 8192), (256, 3584, 8192), (512, 3584, 8192), (1024, 14336, 8192), (2048, 4096, 4096),
      (1024, 3000, 5000), (2048, 14336, 8192), (4096, 3584, 8192), (4096, 14336, 8192), (200, 5000, 3000), (8192, 3584, 8192)]
AG, RS = (AG0, RS0) if dev.type == 'cuda' else ([(8, 64, 48)], [(16, 64, 48), (4, 64, 40)])
timer = Timer(tp, dev)
def bf(*s): return torch.randn(*s, device=dev).to(torch.bfloat16)
rows = []
for op in which.split(","):
    for (m, K, N) in (AG if op == "ag" else RS):
        M = m if op == "rs" else m
        sets = [(bf(m, K), bf(N, K)) for _ in range(2)]
        if op == "ag":
            def call(bound):
                def f(x):
                    agm.SM_PUSH_MAX_BYTES = bound
                    agm.SM_PUSH_MAX_TILES = BIG if bound else 0  # the tiles' bound too, where the code has one
                    return fluxlite.ag_gemm(x[0], x[1], impl="fused", timeout=30 if bound else 31)
                return f
            fns = dict(seq=lambda x: fluxlite.ag_gemm(x[0], x[1], impl="sequential"), new=call(BIG), old=call(0))
        else:
            def call(bound):
                def f(x):
                    rsm.ONE_SHOT_MAX_BYTES = bound
                    return fluxlite.gemm_rs(x[0], x[1], impl="fused", timeout=30 if bound else 31)
                return f
            fns = dict(seq=lambda x: fluxlite.gemm_rs(x[0], x[1], impl="sequential"), new=call(BIG), old=call(0))
        ref = fns["seq"](sets[0]).float()
        errs = {k: ((fns[k](sets[0]).float() - ref).norm() / ref.norm()).item() for k in ("new", "old")}
        t, _ = time_rounds(timer, fns, sets, rounds=ROUNDS)
        s = t["seq"]
        line = (f"{op} {m}x{K}->{N} KiB/rank={(m*K*2 if op=='ag' else (W-1)*m//W*N*2)>>10}: "
                + " ".join(f"{k} thr {t[k]['throughput']*1e3:.1f} lat {t[k]['latency']*1e3:.1f} host {t[k]['host']*1e3:.1f}" for k in fns)
                + f" | new/old thr {t['new']['throughput']/t['old']['throughput']:.3f} lat {t['new']['latency']/t['old']['latency']:.3f}"
                + f" new/seq thr {t['new']['throughput']/s['throughput']:.3f} lat {t['new']['latency']/s['latency']:.3f}"
                + f" old/seq thr {t['old']['throughput']/s['throughput']:.3f} | err {errs['new']:.1e} {errs['old']:.1e}")
        if r == 0: print(line, flush=True)
        rows.append(line)
fluxlite.release_workspaces()
dist.destroy_process_group()
