#!/usr/bin/env python
"""One training step (forward + backward) of a Llama-style transformer block built from fluxlite's
tensor-parallel layers with sequence parallelism, for each ``overlap`` mode.

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --out bench_layers.json

The block (defaults: Llama-3-70B's widths): RMSNorm -> QKV ColumnParallelLinear (GQA: 64 query heads,
8 KV heads, head dim 128) -> causal flash attention over this rank's heads -> proj RowParallelLinear
-> residual; RMSNorm -> fc1 ColumnParallelLinear (gate and up, 2 x ffn) -> SwiGLU -> fc2
RowParallelLinear -> residual. Activations between the TP regions are [s/tp, b, h] (sequence
parallel), so the four layers run fluxlite's AG-GEMM / GEMM-RS in the forward and in the backward.

The same block (same weights, same inputs) is timed under each mode: the mode only switches the
layers' ``overlap``. A step is: forward, backward from a fixed upstream gradient, and the TP
all-reduce of the sequence-parallel grads (RMSNorm weights); no optimizer step (identical in every
mode). Timing: CUDA events around each step after ``--warmup`` steps per mode, the modes interleaved
step by step; the median over ``--iters`` steps on each rank, then the max over ranks. Before timing,
the first step's output and grads under each mode are compared with the first mode's (the relative
error is reported; above ``--max-rel-err`` the script exits 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import fluxlite
from fluxlite.demo import Timer
from fluxlite.parallel import (
    ColumnParallelLinear,
    ModelParallelConfig,
    RowParallelLinear,
    allreduce_sequence_parallel_grads,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2, help="seq x batch tokens per step (default 8192)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a smoke run of this script on gloo ranks (wall-clock timing; not a benchmark)")
    p.add_argument("--modes", default="sequential,fused", help="comma-separated overlap modes; the first is the baseline")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default=None, help="write the results as JSON here (rank 0)")
    p.add_argument("--require-speedup", action="store_true", help="exit 1 unless every later mode beats the first")
    p.add_argument("--max-rel-err", type=float, default=5e-2,
                   help="exit 1 if a mode's first-step output or any grad differs from the first mode's by more (norm-relative)")
    return p.parse_args(argv)


class LlamaBlock(nn.Module):
    def __init__(self, a, tp_size: int, dtype: torch.dtype):
        super().__init__()
        cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=dtype, use_cpu_initialization=False)
        h, d = a.hidden, a.hidden // a.heads
        self.hq, self.hkv, self.d = a.heads // tp_size, a.kv_heads // tp_size, d
        std, out_std = 0.02, 0.02 / 8
        normal = lambda s: (lambda w: nn.init.normal_(w, std=s))  # noqa: E731
        self.norm1 = nn.RMSNorm(h, dtype=dtype)
        self.qkv = ColumnParallelLinear(h, (a.heads + 2 * a.kv_heads) * d, config=cfg, init_method=normal(std), bias=False)
        self.proj = RowParallelLinear(a.heads * d, h, config=cfg, init_method=normal(out_std), bias=False,
                                      input_is_parallel=True, skip_bias_add=False)
        self.norm2 = nn.RMSNorm(h, dtype=dtype)
        self.fc1 = ColumnParallelLinear(h, 2 * a.ffn, config=cfg, init_method=normal(std), bias=False, stride=2)
        self.fc2 = RowParallelLinear(a.ffn, h, config=cfg, init_method=normal(out_std), bias=False,
                                     input_is_parallel=True, skip_bias_add=False)
        for norm in (self.norm1, self.norm2):
            norm.weight.sequence_parallel = True

    def linears(self):
        return (self.qkv, self.proj, self.fc1, self.fc2)

    def set_overlap(self, mode: str):
        for layer in self.linears():
            layer.overlap = mode

    def forward(self, x):  # x: [s/tp, b, h]
        qkv, _ = self.qkv(self.norm1(x))  # [s, b, (hq + 2 hkv) d] on this rank
        s, b = qkv.shape[:2]
        q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        q = q.view(s, b, self.hq, self.d).permute(1, 2, 0, 3)
        k = k.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(self.hq // self.hkv, dim=1)
        v = v.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(self.hq // self.hkv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, hq, s, d]
        out, _ = self.proj(y.permute(2, 0, 1, 3).reshape(s, b, self.hq * self.d))
        x = x + out
        gate_up, _ = self.fc1(self.norm2(x))
        gate, up = gate_up.chunk(2, dim=-1)
        out, _ = self.fc2(F.silu(gate) * up)
        return x + out


def linear_flops(a, tp_size: int) -> float:
    """GEMM FLOPs of one forward+backward on one rank (3 GEMMs per linear layer)."""
    d = a.hidden // a.heads
    weights = a.hidden * (a.heads + 2 * a.kv_heads) * d + a.heads * d * a.hidden + a.hidden * 2 * a.ffn + a.ffn * a.hidden
    return 3 * 2 * a.seq * a.batch * weights / tp_size


def step(block, x, grad):
    for p in block.parameters():
        p.grad = None
    x.grad = None
    out = block(x)
    out.backward(grad)
    allreduce_sequence_parallel_grads(block)
    return out


def rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    fluxlite.synchronize()  # raise any timeout a fused kernel recorded


def _device_name(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke run, not a benchmark)"


def _peak_gib(device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_layers.py needs CUDA GPUs (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    tp = fluxlite.init("nccl" if a.device == "cuda" else "gloo")
    W, rank = tp.world_size, tp.rank
    device = torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    timer = Timer(device)  # CUDA events (wall clock on CPU), ranks aligned before each step
    modes = a.modes.split(",")
    for what, n in (("heads", a.heads), ("kv-heads", a.kv_heads), ("ffn", a.ffn), ("seq", a.seq)):
        if n % W:
            raise SystemExit(f"--{what} ({n}) must be divisible by the number of ranks ({W})")

    torch.manual_seed(0)
    block = LlamaBlock(a, W, dtype).to(device)
    g = torch.Generator(device=device).manual_seed(1 + rank)
    x = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g).requires_grad_()
    grad = torch.randn(a.seq // W, a.batch, a.hidden, device=device, dtype=dtype, generator=g)

    # correctness across modes on the first step
    errors, first = {}, None
    for mode in modes:
        block.set_overlap(mode)
        out = step(block, x, grad)
        _sync(device)
        snap = [out.detach().clone(), x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
        if first is None:
            first = snap
        else:
            errors[mode] = max(rel_err(s, f) for s, f in zip(snap, first))
    del first

    # warm-up, then the modes interleaved step by step (clock and thermal drift hit every mode alike)
    peak = {}
    for mode in modes:
        block.set_overlap(mode)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(a.warmup):
            step(block, x, grad)
        _sync(device)
        peak[mode] = _peak_gib(device)
    times = {mode: [] for mode in modes}
    for _ in range(a.iters):
        for mode in modes:
            block.set_overlap(mode)
            times[mode].append(timer.time_once(lambda: step(block, x, grad)))
    _sync(device)
    results = {}
    for mode in modes:
        med = torch.tensor([statistics.median(times[mode])], device=device, dtype=torch.float64)
        all_med = [torch.zeros_like(med) for _ in range(W)]
        dist.all_gather(all_med, med)
        per_rank = [t.item() for t in all_med]
        results[mode] = dict(
            median_ms=max(per_rank), median_ms_per_rank=per_rank, min_ms=min(times[mode]), max_ms=max(times[mode]),
            linear_tflops=linear_flops(a, W) / (max(per_rank) * 1e-3) / 1e12, peak_mem_gib=peak[mode],
            max_rel_err_vs_first=errors.get(mode, 0.0),
        )
    base = modes[0]
    speedups = {m: results[base]["median_ms"] / results[m]["median_ms"] for m in modes[1:]}
    ok = all(s > 1.0 for s in speedups.values())
    accurate = all(e <= a.max_rel_err for e in errors.values())
    if rank == 0:
        print(f"Llama block step (fwd+bwd), hidden {a.hidden}, ffn {a.ffn}, heads {a.heads}/{a.kv_heads}, "
              f"seq {a.seq} x batch {a.batch}, {a.dtype}, TP={W} with sequence parallelism, "
              f"{_device_name(device)}; median of {a.iters} after {a.warmup} warm-up, max over ranks")
        print(f"{'overlap':>12} {'step ms':>9} {'linear TFLOP/s':>15} {'peak GiB':>9} {'max rel err':>12}")
        for mode in modes:
            r = results[mode]
            print(f"{mode:>12} {r['median_ms']:9.2f} {r['linear_tflops']:15.0f} {r['peak_mem_gib']:9.1f} "
                  f"{r['max_rel_err_vs_first']:12.2e}")
        for m, s in speedups.items():
            print(f"speedup {m} over {base}: {s:.3f}x")
        if not accurate:
            print(f"FAIL: a mode's first step differs from {base}'s by more than {a.max_rel_err:.0e}: {errors}")
        if a.out:
            import triton

            meta = dict(torch=torch.__version__, triton=triton.__version__, device=_device_name(device), world_size=W,
                        nccl=".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
                        env={k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "CUDA_MODULE_LOADING") if k in os.environ})
            with open(a.out, "w") as f:
                json.dump(dict(config=vars(a), meta=meta, results=results, speedup=speedups, baseline=base,
                               accurate=accurate), f, indent=2)
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 1 if (not accurate or (a.require_speedup and not ok)) else 0


if __name__ == "__main__":
    sys.exit(main())
