"""SM clock and power of both GPUs while the MLP block steps back to back, per mode (Megatron's layers,
fluxlite fused): nvidia-smi sampled every 20 ms over 60 steps. torchrun --nproc-per-node 2 clk.py --block mlp"""
import os, statistics, subprocess, sys, time, torch, torch.distributed as dist
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import bench_layers as bl
import fluxlite
a = bl.parse_args(sys.argv[1:] + ["--modes", "megatron,fused"])
tp = fluxlite.init(None); W, rank = tp.world_size, tp.rank
device = torch.device("cuda", torch.cuda.current_device()); dtype = torch.bfloat16
blocks = bl.Blocks(a, W, dtype, device, True)
g = torch.Generator(device=device).manual_seed(1 + rank)
x = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g).requires_grad_()
grad = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g)
STEPS = 60
for rnd in range(2):
    for m in ("megatron", "fused"):
        block = blocks.configure(m)
        for _ in range(10): bl.step(block, x, grad)
        torch.cuda.synchronize(); dist.barrier()
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=index,clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"],
                               stdout=subprocess.PIPE, text=True) if rank == 0 else None
        time.sleep(0.3) if rank == 0 else None
        dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(STEPS): bl.step(block, x, grad)
        e.record(); e.synchronize(); dist.barrier()
        if rank == 0:
            smi.terminate(); out = smi.communicate()[0]
            rows = [l.split(",") for l in out.strip().splitlines() if l.count(",") == 2]
            skip = len(rows) // 8  # drop the edges
            rows = rows[skip:len(rows) - skip]
            for gpu in ("0", "1"):
                r = [(float(c), float(p)) for i, c, p in rows if i.strip() == gpu]
                print(f"round {rnd} {m:8s} gpu{gpu}: step {s.elapsed_time(e) / STEPS:6.2f} ms  SM clock median {statistics.median(c for c, _ in r):6.0f} MHz"
                      f" (min {min(c for c, _ in r):.0f})  power median {statistics.median(p for _, p in r):5.0f} W  samples {len(r)}", flush=True)
fluxlite.synchronize(); dist.destroy_process_group()
