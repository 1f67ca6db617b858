"""Host time of repeated fused calls (both ranks): per case, median host time per call over 200
calls (synchronising every 20), then cProfile of 200 more (rank 0: $R/prof_<case>.txt)."""
import os, sys, time, cProfile, pstats, io, statistics as st
sys.path.append(os.getcwd())
import torch, torch.distributed as dist
import fluxlite
tp = fluxlite.init(); rank = tp.rank; W = tp.world_size
dev = torch.device("cuda", torch.cuda.current_device())
bf = torch.bfloat16
def mk(*s): return torch.randn(*s, device=dev, dtype=bf)
a_ar, w_ar = mk(4096, 13824), mk(8192, 13824)
a_ag, w_ag = mk(1024, 4096), mk(4096, 4096)
a_rs, w_rs = mk(2048, 4096), mk(4096, 4096)
a_s, w_s = mk(64, 8192), mk(8192, 8192)
cases = {"ar_two_shot": lambda: fluxlite.gemm_ar(a_ar, w_ar, impl="fused"),
         "ar_one_shot": lambda: fluxlite.gemm_ar(a_s, w_s, impl="fused"),
         "ag": lambda: fluxlite.ag_gemm(a_ag, w_ag, impl="fused"),
         "rs": lambda: fluxlite.gemm_rs(a_rs, w_rs, impl="fused"),
         "ar_seq": lambda: fluxlite.gemm_ar(a_ar, w_ar, impl="sequential"),
         "ar_auto": lambda: fluxlite.gemm_ar(a_ar, w_ar)}
for name, f in cases.items():
    for _ in range(5):
        f()
    torch.cuda.synchronize(); dist.barrier()
    per = []
    for i in range(200):
        t = time.perf_counter(); f(); per.append((time.perf_counter() - t) * 1e6)
        if i % 20 == 19:
            torch.cuda.synchronize()
    torch.cuda.synchronize(); dist.barrier()
    pr = cProfile.Profile()
    pr.enable()
    for i in range(200):
        f()
        if i % 20 == 19:
            torch.cuda.synchronize()
    pr.disable()
    torch.cuda.synchronize(); dist.barrier()
    if rank == 0:
        print(f"{name}: host {st.median(per):.1f} us per call (p10 {sorted(per)[20]:.1f}, p90 {sorted(per)[180]:.1f})", flush=True)
        s = io.StringIO()
        ps = pstats.Stats(pr, stream=s).sort_stats("tottime"); ps.print_stats(35)
        ps.sort_stats("cumulative"); ps.print_stats(45)
        open(os.path.join(os.environ["R"], f"prof_{name}.txt"), "w").write(s.getvalue())
fluxlite.release_workspaces(); dist.destroy_process_group()
