#!/usr/bin/env python
"""One training step (forward + backward) of a Llama-style transformer block built from fluxlite's
tensor-parallel layers, with sequence parallelism or without, for each ``overlap`` mode.

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --out bench_layers.json

The block (defaults: Llama-3-70B's widths): RMSNorm -> QKV ColumnParallelLinear (GQA: 64 query heads,
8 KV heads, head dim 128) -> causal flash attention over this rank's heads -> proj RowParallelLinear
-> residual; RMSNorm -> fc1 ColumnParallelLinear (gate and up, 2 x ffn) -> SwiGLU -> fc2
RowParallelLinear -> residual. Activations between the TP regions are [s/tp, b, h] (sequence
parallel), so the four layers run fluxlite's AG-GEMM / GEMM-RS in the forward and in the backward.
``--block mlp`` times the MLP half alone (RMSNorm -> fc1 -> SwiGLU -> fc2 -> residual): no attention,
whose compute has no TP communication beside it, so more of the step is the layers' communication.
``--no-sequence-parallel``: Megatron's default layout instead, every rank holding every token
([s, b, h], the same on every rank): the Row layers' forward and the Column layers' backward
all-reduce (fluxlite: GEMM-AllReduce).

Mode ``megatron`` is the baseline a user compares against: the same block with megatron-core's own
``tensor_parallel.ColumnParallelLinear`` / ``RowParallelLinear`` (same weights, copied), e.g. ``--modes megatron,fused,auto``. It needs megatron-core (carry its wheel to the GPU).
Mode ``deferred`` is the deferred-norm block: fluxlite's ``LayerNormColumnParallelLinear`` (RMSNorm deferred
past the GEMM, fused overlap) for QKV and fc1, fc1 with the SwiGLU epilogue, and no separate norms;
the same weights (each norm's weight becomes its layer's ``layer_norm_weight``). Mode
``deferred-unfused-act`` is that block with SwiGLU applied apart from fc1's epilogue, as the other
modes do: the fused epilogue keeps no pre-activation, so its backward recomputes fc1's GEMM, and the
pair of modes shows what that trade costs.

The same block (same weights, same inputs) is timed under each mode. A step is: forward, backward
from a fixed upstream gradient, and the TP all-reduce of the sequence-parallel grads (RMSNorm
weights); no optimizer step (identical in every mode). Timings, the modes interleaved so that
clock and thermal drift hit them alike, each a median over steps (or rounds) on each rank, then the
max over ranks:

* latency: one step with the ranks aligned and synchronised around it (CUDA events);
* throughput: ``--throughput-steps`` steps queued back to back behind a ``torch.cuda._sleep`` (the
  host runs ahead) and a one-element all-reduce after it (the ranks start together), CUDA events
  around the steps, per step; ``--rounds`` rounds.

Each speedup over the first mode comes with the 95% bounds (each side) of the median of its
per-reading speedups, the modes' readings paired as they were interleaved, each the max over the
ranks (from 5 readings; ``-`` with fewer): a speedup near a target reads inside or outside the
steps' spread.

Memory (CUDA): the peak allocated over the warm-up steps of each mode, and the activations a
forward keeps for its backward (allocated after the forward minus before it). Before timing, the
first step's output and grads under each mode are compared with the first mode's (the
relative error is reported; above ``--max-rel-err`` the script exits 1).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from fluxlite._cli import ArgumentParser
import fluxlite
from fluxlite import dispatch
from fluxlite.demo import Timer
from fluxlite.profile.report import bounds_span, no_nan
from fluxlite.timing import meet
from fluxlite.parallel import (
    ColumnParallelLinear,
    LayerNormColumnParallelLinear,
    ModelParallelConfig,
    RowParallelLinear,
    allreduce_sequence_parallel_grads,
)

NORM_EPS = 1e-5
# The deferred block's names for the plain block's norm weights (mode ``deferred``).
DEFERRED_NAMES = {"norm1.weight": "qkv.layer_norm_weight", "norm2.weight": "fc1.layer_norm_weight"}
DEFERRED_NAMES_BACK = {v: k for k, v in DEFERRED_NAMES.items()}


def add_step_args(p: argparse.ArgumentParser, *, modes: str, dtypes: tuple, warmup: int, iters: int, rounds: int,
                  steps: int) -> None:
    """The arguments this script shares with bench_gpt.py: Llama-3-70B's widths, the tokens, and how
    a training step is timed (with these defaults)."""
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2, help="seq x batch tokens per step (default 8192)")
    p.add_argument("--dtype", choices=dtypes, default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a smoke run of this script on gloo ranks (wall-clock timing; not a benchmark)")
    p.add_argument("--modes", default=modes, help="comma-separated overlap modes; the first is the baseline")
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--iters", type=int, default=iters, help="latency: steps per mode")
    p.add_argument("--rounds", type=int, default=rounds, help="throughput: rounds per mode")
    p.add_argument("--throughput-steps", type=int, default=steps, help="throughput: steps queued back to back per round")
    p.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                   help="every rank holds every token (Megatron's default): the Row forward and the Column "
                        "backward all-reduce")
    p.add_argument("--out", default=None, help="write the results as JSON here (rank 0)")


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_step_args(p, modes="sequential,fused", dtypes=("bf16", "fp16", "fp32"), warmup=5, iters=20, rounds=5, steps=4)
    p.add_argument("--block", choices=("transformer", "mlp"), default="transformer",
                   help="the whole block (attention and MLP) or its MLP half alone")
    p.add_argument("--require-speedup", action="store_true", help="exit 1 unless every later mode beats the first")
    p.add_argument("--max-rel-err", type=float, default=5e-2,
                   help="exit 1 if a mode's first-step output or any grad differs from the first mode's by more (norm-relative)")
    return p.parse_args(argv)


class LlamaBlock(nn.Module):
    """The block, its four linear layers fluxlite's, or with ``megatron`` megatron-core's own; with
    ``a.block == "mlp"`` its MLP half alone (fc1 and fc2, no attention, no QKV or proj)."""

    def __init__(self, a, tp_size: int, dtype: torch.dtype, megatron: bool = False, deferred: bool = False):
        super().__init__()
        if megatron:
            from megatron.core import ModelParallelConfig as MegatronConfig
            from megatron.core.tensor_parallel import ColumnParallelLinear as Col
            from megatron.core.tensor_parallel import RowParallelLinear as Row

            cfg = MegatronConfig(tensor_model_parallel_size=tp_size, sequence_parallel=a.sequence_parallel,
                                 params_dtype=dtype,
                                 use_cpu_initialization=a.device == "cpu", bf16=dtype == torch.bfloat16,
                                 fp16=dtype == torch.float16)
        else:
            Col, Row = ColumnParallelLinear, RowParallelLinear
            cfg = ModelParallelConfig(sequence_parallel=a.sequence_parallel, params_dtype=dtype,
                                      use_cpu_initialization=False)
        h, d = a.hidden, a.hidden // a.heads
        self.hq, self.hkv, self.d = a.heads // tp_size, a.kv_heads // tp_size, d
        std, out_std = 0.02, 0.02 / 8
        normal = lambda s: (lambda w: nn.init.normal_(w, std=s))  # noqa: E731
        self.swiglu = deferred  # fc1's epilogue applies it
        self.attention = a.block == "transformer"
        if deferred:  # the norms move into QKV and fc1 (RMSNorm, eps NORM_EPS)
            norm_col = dict(normalization="RMSNorm", eps=NORM_EPS, overlap="fused")
            self.norm1 = self.norm2 = nn.Identity()
            if self.attention:
                self.qkv = LayerNormColumnParallelLinear(h, (a.heads + 2 * a.kv_heads) * d, config=cfg,
                                                         init_method=normal(std), bias=False, **norm_col)
            self.fc1 = LayerNormColumnParallelLinear(h, 2 * a.ffn, config=cfg, init_method=normal(std), bias=False,
                                                     stride=2, activation="swiglu", **norm_col)
        else:
            if self.attention:
                self.norm1 = nn.RMSNorm(h, eps=NORM_EPS, dtype=dtype)
                self.qkv = Col(h, (a.heads + 2 * a.kv_heads) * d, config=cfg, init_method=normal(std), bias=False)
            self.norm2 = nn.RMSNorm(h, eps=NORM_EPS, dtype=dtype)
            self.fc1 = Col(h, 2 * a.ffn, config=cfg, init_method=normal(std), bias=False, stride=2)
            for norm in self.norms():
                norm.weight.sequence_parallel = a.sequence_parallel
        if self.attention:
            self.proj = Row(a.heads * d, h, config=cfg, init_method=normal(out_std), bias=False,
                            input_is_parallel=True, skip_bias_add=False)
        self.fc2 = Row(a.ffn, h, config=cfg, init_method=normal(out_std), bias=False,
                       input_is_parallel=True, skip_bias_add=False)

    def linears(self):
        return (self.qkv, self.proj, self.fc1, self.fc2) if self.attention else (self.fc1, self.fc2)

    def norms(self):
        return (self.norm1, self.norm2) if self.attention else (self.norm2,)

    def configure(self, mode: str):
        for layer in self.linears():
            layer.overlap = mode
        return self

    def forward(self, x):  # x: [s/tp, b, h] ([s, b, h] without sequence parallelism)
        if self.attention:
            x = self._attention(x)
        gate_up, _ = self.fc1(self.norm2(x))
        if not self.swiglu:
            gate, up = gate_up.chunk(2, dim=-1)
            gate_up = F.silu(gate) * up
        out, _ = self.fc2(gate_up)
        return x + out

    def _attention(self, x):  # x + proj(attention(qkv(norm1(x))))
        qkv, _ = self.qkv(self.norm1(x))  # [s, b, (hq + 2 hkv) d] on this rank
        s, b = qkv.shape[:2]
        q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        q = q.view(s, b, self.hq, self.d).permute(1, 2, 0, 3)
        k = k.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(self.hq // self.hkv, dim=1)
        v = v.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(self.hq // self.hkv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, hq, s, d]
        out, _ = self.proj(y.permute(2, 0, 1, 3).reshape(s, b, self.hq * self.d))
        return x + out


def linear_flops(a, tp_size: int) -> float:
    """GEMM FLOPs of one forward+backward on one rank (3 GEMMs per linear layer)."""
    d = a.hidden // a.heads
    weights = a.hidden * 2 * a.ffn + a.ffn * a.hidden
    if a.block == "transformer":
        weights += a.hidden * (a.heads + 2 * a.kv_heads) * d + a.heads * d * a.hidden
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


DEFERRED_MODES = ("deferred", "deferred-unfused-act")  # the deferred-norm block, SwiGLU in fc1's epilogue or not


class Blocks:
    """fluxlite's block, and its twins with the same weights: megatron-core's when ``megatron`` is a
    mode, the deferred-norm block when ``deferred`` is."""

    def __init__(self, a, W: int, dtype: torch.dtype, device, megatron: bool, deferred: bool = False) -> None:
        torch.manual_seed(0)
        self.fluxlite = LlamaBlock(a, W, dtype).to(device)
        self.deferred = None
        if deferred:
            self.deferred = LlamaBlock(a, W, dtype, deferred=True).to(device)
            theirs = dict(self.deferred.named_parameters())
            with torch.no_grad():
                for name, p in self.fluxlite.named_parameters():
                    theirs[DEFERRED_NAMES.get(name, name)].copy_(p)
        self.megatron = None
        if megatron:
            _megatron_parallel_state(W, device)
            self.megatron = LlamaBlock(a, W, dtype, megatron=True).to(device)
            theirs = dict(self.megatron.named_parameters())
            with torch.no_grad():
                for name, p in self.fluxlite.named_parameters():
                    theirs[name].copy_(p)  # same local shards: both layers keep [out/tp, in] / [out, in/tp]
            for norm in self.megatron.norms():
                norm.weight.sequence_parallel = a.sequence_parallel

    def configure(self, mode: str) -> LlamaBlock:
        if mode == "megatron":
            return self.megatron
        if mode in DEFERRED_MODES:  # fc1's epilogue applies SwiGLU, or the block does after it
            fused_act = mode == "deferred"
            self.deferred.fc1.activation, self.deferred.swiglu = ("swiglu" if fused_act else None), fused_act
            return self.deferred.configure("fused")
        return self.fluxlite.configure(mode)


def grads(block: LlamaBlock) -> list[torch.Tensor]:
    """The parameters' grads in one order for every block (the deferred block's norm weights under
    the names of the norms they replace)."""
    named = {DEFERRED_NAMES_BACK.get(n, n): p for n, p in block.named_parameters()}
    return [named[n].grad for n in sorted(named)]


def _megatron_parallel_state(W: int, device) -> None:
    """Megatron's model-parallel state with TP = ``W``. A CPU smoke run gets the stand-ins that let
    Megatron's layers run on gloo (as tests/test_parallel_megatron.py does); not a benchmark."""
    import contextlib
    import warnings

    warnings.filterwarnings("ignore")  # Megatron warns at import about apex / TE
    if device.type == "cpu":
        torch.cuda.current_device = lambda: torch.device("cpu")
    from megatron.core import parallel_state, tensor_parallel

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=W)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    else:
        tensor_parallel.random.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()


def time_throughput(timer: Timer, fn, steps: int) -> float:
    """Milliseconds per call of ``fn`` over ``steps`` calls queued back to back: on CUDA behind a
    ~50 ms sleep, so that the host runs ahead of the GPU and only the GPU's time counts, the ranks
    meeting on the device after it (their sleeps start as far apart as their hosts leave the
    barrier; the first step would otherwise wait that out in its first collective)."""
    timer.align()
    if not timer.cuda:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        return (time.perf_counter() - t0) * 1e3 / steps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100_000_000)
    meet(timer.device)  # the ranks start the steps together, however far apart their sleeps started
    start.record()
    for _ in range(steps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def interleaved_timings(modes: list[str], run_of, timer: Timer, a) -> tuple[dict, dict]:
    """``(latency, throughput)``: per mode, ``a.iters`` one-step latencies and ``a.rounds`` throughput
    readings (ms per step) of ``run_of(mode)()``, the modes interleaved so that clock and thermal
    drift hit them alike (this rank's readings; :func:`all_ranks` gathers them)."""
    latency, throughput = {m: [] for m in modes}, {m: [] for m in modes}
    for _ in range(a.iters):
        for m in modes:
            latency[m].append(timer.time_once(run_of(m)))
    for _ in range(a.rounds):
        for m in modes:
            throughput[m].append(time_throughput(timer, run_of(m), a.throughput_steps))
    return latency, throughput


def paired_speedup_bounds(base: list[float], mine: list[float], device, world_size: int) -> list[float]:
    """``[low, high]``: the bounds, at 95% each side, of the median of the per-reading speedups
    ``base[i] / mine[i]`` (:func:`interleaved_timings` pairs the modes' ``i``-th readings in time),
    each reading the max over the ranks; infinite (null in the JSON) under 5 readings."""
    b, m = (_gathered(v, device, world_size).amax(dim=0).tolist() for v in (base, mine))
    low, _, high = dispatch.paired_bounds(b, m)
    return [low, high]


def kept_activations_gib(block, x, grad, device) -> float:
    """GiB a forward keeps for its backward (allocated after it minus before it); NaN on CPU."""
    if device.type != "cuda":
        return float("nan")
    def allocated() -> int:  # once idle, with the blocks the producer streams used released (empty_cache)
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        return torch.cuda.memory_allocated(device)

    before = allocated()
    out = block(x)
    kept = allocated() - before
    out.backward(grad)
    return kept / 2**30


def all_ranks(value: float, device, world_size: int) -> list[float]:
    """``value`` from every rank, in rank order."""
    return _gathered([value], device, world_size)[:, 0].tolist()


def _gathered(values: list[float], device, world_size: int) -> torch.Tensor:
    """``[world_size, len(values)]``: every rank's ``values`` (the same count on each), in rank order."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(t) for _ in range(world_size)]
    dist.all_gather(gathered, t)
    return torch.stack(gathered)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_layers.py needs CUDA GPUs (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    tp = fluxlite.init(None if a.device == "cuda" else "gloo")  # None: NCCL, or gloo when ranks share a GPU
    W, rank = tp.world_size, tp.rank
    device = torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    timer = Timer(device)  # CUDA events (wall clock on CPU), ranks aligned before each step
    modes = a.modes.split(",")
    for what, n in (("heads", a.heads), ("kv-heads", a.kv_heads), ("ffn", a.ffn), ("seq", a.seq)):
        if n % W:
            raise SystemExit(f"--{what} ({n}) must be divisible by the number of ranks ({W})")

    blocks = Blocks(a, W, dtype, device, "megatron" in modes, any(m in DEFERRED_MODES for m in modes))
    # this rank's tokens under sequence parallelism, else every token, the same on every rank
    g = torch.Generator(device=device).manual_seed(1 + rank if a.sequence_parallel else 1)
    rows = a.seq // W if a.sequence_parallel else a.seq
    x = torch.randn(rows, a.batch, a.hidden, device=device, dtype=dtype, generator=g).requires_grad_()
    grad = torch.randn(rows, a.batch, a.hidden, device=device, dtype=dtype, generator=g)
    run_of = lambda m: functools.partial(step, blocks.configure(m), x, grad)  # noqa: E731

    # correctness across modes on the first step
    errors, first = {}, None
    for m in modes:
        block = blocks.configure(m)
        out = step(block, x, grad)
        _sync(device)
        snap = [out.detach().clone(), x.grad.clone()] + [g.clone() for g in grads(block)]
        if first is None:
            first = snap
        else:
            errors[m] = max(rel_err(s, f) for s, f in zip(snap, first))
    del first

    # warm-up with the peak memory of each mode, then the timings, modes interleaved
    peak, kept = {}, {}
    for m in modes:
        block = blocks.configure(m)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(a.warmup):
            step(block, x, grad)
        _sync(device)
        peak[m] = _peak_gib(device)
        for p in block.parameters():
            p.grad = None
        kept[m] = kept_activations_gib(block, x, grad, device)
    latency, throughput = interleaved_timings(modes, run_of, timer, a)
    _sync(device)
    results = {}
    for m in modes:
        per_rank = all_ranks(statistics.median(latency[m]), device, W)
        tput = max(all_ranks(statistics.median(throughput[m]), device, W))
        results[m] = dict(
            median_ms=max(per_rank), median_ms_per_rank=per_rank, min_ms=min(latency[m]),
            max_ms=max(latency[m]), throughput_ms=tput,
            linear_tflops=linear_flops(a, W) / (max(per_rank) * 1e-3) / 1e12, peak_mem_gib=peak[m],
            activations_gib=kept[m], max_rel_err_vs_first=errors.get(m, 0.0),
        )
    base = modes[0]
    speedups = {m: results[base]["median_ms"] / results[m]["median_ms"] for m in modes[1:]}
    throughput_speedups = {m: results[base]["throughput_ms"] / results[m]["throughput_ms"] for m in modes[1:]}
    speedup_bounds = {m: dict(latency=paired_speedup_bounds(latency[base], latency[m], device, W),
                              throughput=paired_speedup_bounds(throughput[base], throughput[m], device, W))
                      for m in modes[1:]}
    ok = all(s > 1.0 for s in speedups.values())
    accurate = all(e <= a.max_rel_err for e in errors.values())
    if rank == 0:
        what = "Llama block" if a.block == "transformer" else "Llama MLP block (no attention)"
        print(f"{what} step (fwd+bwd), hidden {a.hidden}, ffn {a.ffn}, heads {a.heads}/{a.kv_heads}, "
              f"seq {a.seq} x batch {a.batch}, {a.dtype}, TP={W} "
              f"{'with' if a.sequence_parallel else 'without'} sequence parallelism, "
              f"{_device_name(device)}; latency: median of {a.iters} after {a.warmup} warm-up; throughput: "
              f"median of {a.rounds} rounds of {a.throughput_steps} steps; max over ranks")
        print(f"{'mode':>16} {'latency ms':>11} {'thruput ms':>11} {'linear TFLOP/s':>15} {'peak GiB':>9} "
              f"{'activ GiB':>10} {'max rel err':>12}")
        for m in modes:
            r = results[m]
            print(f"{m:>16} {r['median_ms']:11.2f} {r['throughput_ms']:11.2f} {r['linear_tflops']:15.0f} "
                  f"{r['peak_mem_gib']:9.2f} {r['activations_gib']:10.2f} {r['max_rel_err_vs_first']:12.2e}")
        for m, s in speedups.items():
            b = speedup_bounds[m]
            print(f"speedup {m} over {base}: {s:.3f}x (latency; 95%: {bounds_span(b['latency'])}), "
                  f"{throughput_speedups[m]:.3f}x (throughput; 95%: {bounds_span(b['throughput'])})")
        if not accurate:
            print(f"FAIL: a mode's first step differs from {modes[0]}'s by more than {a.max_rel_err:.0e}: {errors}")
        if a.out:
            import triton

            meta = dict(torch=torch.__version__, triton=triton.__version__, device=_device_name(device), world_size=W,
                        nccl=".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
                        env={k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "CUDA_MODULE_LOADING") if k in os.environ})
            with open(a.out, "w") as f:
                json.dump(no_nan(dict(config=vars(a), meta=meta, results=results, speedup=speedups,
                                      throughput_speedup=throughput_speedups, speedup_bounds=speedup_bounds,
                                      baseline=base, accurate=accurate)), f, indent=2)
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 1 if (not accurate or (a.require_speedup and not ok)) else 0


if __name__ == "__main__":
    sys.exit(main())
