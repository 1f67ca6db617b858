"""Debug: alternate AG push/pull (row-scaled, every activation) and dump flags on a timeout.
torchrun --nproc-per-node 2 .scratch/pull_hang.py ITER [mode]"""
import os, sys, time, torch, torch.distributed as dist
import fluxlite
from fluxlite import epilogue as E
from fluxlite.fused.state import PROCESS
from fluxlite import schedule as sch

dist.init_process_group("nccl")
r, W = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(r)
cpu = dist.new_group(backend="gloo")
iters = int(sys.argv[1]); mode = sys.argv[2] if len(sys.argv) > 2 else "epi"
BF16 = torch.bfloat16
gen = torch.Generator(device="cuda").manual_seed(5)
fails = 0
t_all = time.time()
acts = E.ACTIVATIONS if mode == "epi" else (None,)
shapes = [(2048, 8192, 3584), (1000, 1376, 200)]
n = 0
for it in range(iters):
    for (m, K, N) in shapes:
        for act in acts:
            w = (torch.randn(2 * N if act == "swiglu" else N, K, generator=gen, device="cuda") / K**0.5).to(BF16)
            b = torch.randn(w.shape[0], generator=gen, device="cuda").to(BF16)
            a = torch.randn(m, K, device="cuda").to(BF16)
            s = torch.rand(m, device="cuda") + 0.5
            for gathered in (False, True):
                n += 1
                out = torch.full((W * m, N), float("nan"), dtype=BF16, device="cuda")
                err = None
                t0 = time.time()
                try:
                    fluxlite.ag_gemm(a, w, b, impl="fused", return_gathered=gathered, out=out, activation=act,
                                     row_scale=s if mode != "noscale" else None, scale=0.5, timeout=12)
                    fluxlite.synchronize()
                except fluxlite.FluxliteError as exc:
                    err = exc
                bad = torch.tensor([0 if err is None else 1])
                dist.all_reduce(bad, group=cpu)
                if bad.item():
                    fails += 1
                    for (ws, st) in list(PROCESS.fused_states.items()):
                        side = torch.cuda.Stream()
                        with torch.cuda.stream(side):
                            regs = [st.region(p)[: sch.region_slots(W)].tolist() for p in (0, 1)]
                            seqv = st.sequence.tolist()
                        nz = [[(i, v) for i, v in enumerate(reg) if v] for reg in regs]
                        print(f"FAIL rank {r} call {n} it {it} m={m} act={act} gathered={gathered} epoch={st.epoch} "
                              f"prod_idle={st.producer_stream.query()} dt={time.time()-t0:.1f}\n  err={err}\n  "
                              f"region0 nonzero={nz[0]}\n  region1 nonzero={nz[1]}\n  seq={seqv}", flush=True)
                    fluxlite.release_workspaces()
dist.barrier(group=cpu)
print(f"rank {r}: mode {mode} {n} calls, {fails} failures, {time.time()-t_all:.0f} s", flush=True)
dist.destroy_process_group()
