#!/usr/bin/env python
"""Inference forward of a Llama-style decoder stack built from fluxlite's tensor-parallel layers:
per-layer latency of prefill and decode steps for each implementation, under CUDA graphs.

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --out bench_inference.json

The stack (defaults: Llama-3-70B's widths, ``--layers 2``): per layer RMSNorm -> QKV
ColumnParallelLinear (GQA: 64 query heads, 8 KV heads, head dim 128) -> attention over this rank's
heads -> proj RowParallelLinear -> residual; RMSNorm -> fc1 ColumnParallelLinear (gate and up) ->
SwiGLU -> fc2 RowParallelLinear -> residual. The four linear layers are fluxlite's; forward only,
under ``torch.no_grad``. The world size is the tensor-parallel size.

Cases and their parallel layout:

* prefill (``--prefill``, tokens of one sequence; default 512, 2048, 8192): sequence parallel.
  Activations between the TP regions are ``[s/tp, 1, h]``; QKV and fc1 run fluxlite's AG-GEMM, proj
  and fc2 its GEMM-RS; attention is causal SDPA over the whole sequence.
* decode (``--decode``, tokens per step, one per sequence; default 1, 8, 64, 256): each token
  attends to a static KV cache of ``--context`` positions of its own sequence (a stand-in: the
  step's own K and V are computed but not appended). Sequence parallel where the tokens divide by
  the TP size, the step's tokens split over the ranks as a sequence would be: the Row layer's
  reduce-scatter and the next Column layer's all-gather move what an all-reduce moves, and
  fluxlite's ops run. Otherwise (1 token at TP=2), or everywhere with ``--decode-layout
  replicated``, Megatron's decode layout without sequence parallelism: rows on every rank, the
  Column layers local, the Row layers a GEMM-AllReduce (``fluxlite.gemm_ar``: the matmul then NCCL's
  all-reduce for ``sequential``; for ``fused`` the matmul then fluxlite's one-shot reduction at
  decode sizes, its two-shot protocol above them).

Implementations (``--impls``): fluxlite's ``sequential``, ``fused`` and ``auto`` (the layers'
``overlap``), and ``torch_symm_mem``: the same stack, weights and layout with the four linear
layers' matmuls done by ``torch.ops.symm_mem.fused_all_gather_matmul`` /
``fused_matmul_reduce_scatter`` (CUDA, sequence-parallel cases only). ``auto``'s eager warm-up runs
inside ``fluxlite.dispatch.assume_mode("throughput")``, so its first calls measure and the graph
captures the choice for throughput-bound calls, which is what a graph's replay is.

On CUDA each implementation's forward is captured in a CUDA graph after ``--warmup`` eager
forwards, and the graph's replay is timed (``--eager``: the eager forward). Timings are
:func:`fluxlite.timing.time_samples`: every round times every implementation in an order that
rotates; ``latency`` is one forward with the ranks aligned and synchronised around it (wall clock),
``throughput`` a batch of forwards queued behind a sleep (device time per forward); each the median
over ``--rounds`` rounds, then the max over the ranks, divided by the number of layers. Each
implementation's ratio to sequential comes with the bounds of the median of its per-round ratios
(the same round's forwards, each the max over the ranks; 95% each side, from 5 rounds on), so a
ratio within the spread of the replays reads as such. Before
timing, each implementation's output is compared with sequential's and with an eager sequential
forward's (norm-relative errors; above ``--max-rel-err`` the script exits 1). On CPU (``--device
cpu``, gloo ranks) it is a smoke run of the script, not a benchmark.

Bad arguments: one line on stderr from rank 0 and exit status 2 (the other ranks exit quietly).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fluxlite  # noqa: E402
from fluxlite import dispatch  # noqa: E402
from fluxlite._cli import (NO_MULTICAST_ENV, ArgumentParser, comma_list, no_nvlink_multicast, positive,  # noqa: E402
                           positive_list)
from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear  # noqa: E402
from fluxlite.profile.cli import run_environment  # noqa: E402
from fluxlite.profile.report import bounds_span, no_nan  # noqa: E402
from fluxlite.profile.run import agreed, init_ranks, rel_err  # noqa: E402
from fluxlite.timing import Timer, medians, per_round, run_each_once, time_samples  # noqa: E402

FLUXLITE_IMPLS = ("sequential", "fused", "auto")
TORCH = "torch_symm_mem"
IMPLS = (*FLUXLITE_IMPLS, TORCH)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NORM_EPS = 1e-5
PROG = "bench_inference.py"


def _impls(text: str) -> tuple[str, ...]:
    try:
        items = comma_list(IMPLS)(text)
    except argparse.ArgumentTypeError:
        items = ()
    if "sequential" not in items:
        raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(IMPLS)} with sequential (the "
                                         f"baseline), got {text!r}")
    return ("sequential", *(i for i in items if i != "sequential"))


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    count = positive(int, expected=True)
    p.add_argument("--hidden", type=count, default=8192)
    p.add_argument("--ffn", type=count, default=28672)
    p.add_argument("--heads", type=count, default=64)
    p.add_argument("--kv-heads", type=count, default=8)
    p.add_argument("--layers", type=count, default=2)
    p.add_argument("--prefill", type=positive_list(int), default="512,2048,8192", help="prefill tokens, comma list")
    p.add_argument("--decode", type=positive_list(int), default="1,8,64,256", help="decode tokens per step, comma list")
    p.add_argument("--context", type=count, default=512, help="decode: the KV cache's positions per sequence")
    p.add_argument("--decode-layout", choices=("sp", "replicated"), default="sp",
                   help="sp: sequence parallel where the tokens divide by the TP size, else replicated")
    p.add_argument("--impls", type=_impls, default=None,
                   help=f"comma list of {', '.join(IMPLS)} (default: all; {TORCH} on CUDA only)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a smoke run of this script on gloo ranks (wall-clock timing; not a benchmark)")
    p.add_argument("--eager", action="store_true", help="time the eager forward, not a CUDA graph's replay")
    p.add_argument("--warmup", type=count, default=3, help="eager forwards before capture (and before timing)")
    p.add_argument("--rounds", type=count, default=10, help="timed rounds per case")
    p.add_argument("--max-rel-err", type=float, default=3e-2,
                   help="exit 1 if an implementation's output differs from sequential's by more (norm-relative)")
    p.add_argument("--out", default=None, help="write the results as JSON here (rank 0)")
    a = p.parse_args(argv)
    W = int(os.environ.get("WORLD_SIZE", "1"))
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available here (use --device cpu for a smoke run)")
    if a.impls is None:
        a.impls = IMPLS if a.device == "cuda" else FLUXLITE_IMPLS
    if TORCH in a.impls and a.device != "cuda":
        p.error(f"--impls: {TORCH} runs on CUDA only")
    if a.hidden % a.heads or a.heads % a.kv_heads:
        p.error(f"--hidden ({a.hidden}) must divide by --heads ({a.heads}), and --heads by --kv-heads ({a.kv_heads})")
    for name, n in (("heads", a.heads), ("kv-heads", a.kv_heads), ("ffn", a.ffn)):
        if n % W:
            p.error(f"--{name} ({n}) must be divisible by the number of ranks ({W})")
    bad = [t for t in a.prefill if t % W]
    if bad:
        p.error(f"--prefill: every token count must be divisible by the number of ranks ({W}) for sequence "
                f"parallelism, got {','.join(map(str, bad))}")
    if not math.isfinite(a.max_rel_err) or a.max_rel_err <= 0:
        p.error(f"--max-rel-err must be a positive number, got {a.max_rel_err}")
    return a


# ---- the stack -----------------------------------------------------------------------------------

class DecoderLayer(nn.Module):
    """One Llama-style layer; its four linear layers fluxlite's (module docstring)."""

    def __init__(self, a, W: int, dtype: torch.dtype) -> None:
        super().__init__()
        cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=dtype)
        h, d = a.hidden, a.hidden // a.heads
        self.hq, self.hkv, self.d = a.heads // W, a.kv_heads // W, d
        normal = lambda std: (lambda w: nn.init.normal_(w, std=std))  # noqa: E731
        self.norm1 = nn.RMSNorm(h, eps=NORM_EPS, dtype=dtype)
        self.qkv = ColumnParallelLinear(h, (a.heads + 2 * a.kv_heads) * d, config=cfg, init_method=normal(0.02),
                                        bias=False)
        self.proj = RowParallelLinear(a.heads * d, h, config=cfg, init_method=normal(0.02 / 8), bias=False,
                                      input_is_parallel=True, skip_bias_add=False)
        self.norm2 = nn.RMSNorm(h, eps=NORM_EPS, dtype=dtype)
        self.fc1 = ColumnParallelLinear(h, 2 * a.ffn, config=cfg, init_method=normal(0.02), bias=False, stride=2)
        self.fc2 = RowParallelLinear(a.ffn, h, config=cfg, init_method=normal(0.02 / 8), bias=False,
                                     input_is_parallel=True, skip_bias_add=False)

    def linears(self):
        return (self.qkv, self.proj, self.fc1, self.fc2)

    def attention(self, qkv: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """``qkv: [s, b, (hq + 2 hkv) d]`` -> ``[s, b, hq d]``: causal over the ``s`` tokens (prefill), or
        each of the ``s`` tokens (``b = 1``) against its sequence's cache ``[s, hkv, context, d]`` (decode)."""
        s, b = qkv.shape[:2]
        q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
        if cache is None:
            g = self.hq // self.hkv
            q = q.view(s, b, self.hq, self.d).permute(1, 2, 0, 3)
            k = k.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(g, dim=1)
            v = v.view(s, b, self.hkv, self.d).permute(1, 2, 0, 3).repeat_interleave(g, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, hq, s, d]
            return y.permute(2, 0, 1, 3).reshape(s, b, self.hq * self.d)
        # a token's query heads of one KV head attend together: [s, hkv, g, d] against [s, hkv, context, d]
        y = F.scaled_dot_product_attention(q.view(s, self.hkv, -1, self.d), *cache)
        return y.reshape(s, b, self.hq * self.d)


class Stack(nn.Module):
    """``--layers`` decoder layers; :meth:`forward` runs them with one implementation and layout."""

    def __init__(self, a, tp, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same weights on every rank (each keeps its shards), every run
        self.layers = nn.ModuleList(DecoderLayer(a, tp.world_size, dtype) for _ in range(a.layers)).to(device)
        self.W, self.group_name = tp.world_size, tp.group.group_name
        self.configured: tuple[str, bool] | None = None

    def configure(self, impl: str, sp: bool) -> None:
        """Run the layers as ``impl`` (fluxlite's ``overlap``) with or without sequence parallelism.
        Cheap when they already run so: a timed eager forward calls it, and it walks the layers only
        where the implementation timed before was another."""
        if self.configured == (impl, sp):
            return
        self.configured = (impl, sp)
        for layer in self.layers:
            for linear in layer.linears():
                linear.overlap = impl if impl in FLUXLITE_IMPLS else "sequential"
                linear.sequence_parallel = sp

    def _column(self, linear, x: torch.Tensor, impl: str) -> torch.Tensor:
        if impl != TORCH:
            return linear(x)[0]
        s, b, h = x.shape  # [s/tp, b, h] -> [s, b, out/tp]
        out = torch.ops.symm_mem.fused_all_gather_matmul(x.reshape(s * b, h), [linear.weight.t()], 0,
                                                          self.group_name)[1][0]
        return out.view(s * self.W, b, -1)

    def _row(self, linear, x: torch.Tensor, impl: str) -> torch.Tensor:
        if impl != TORCH:
            return linear(x)[0]
        s, b, k = x.shape  # [s, b, in/tp] -> [s/tp, b, h]
        out = torch.ops.symm_mem.fused_matmul_reduce_scatter(x.reshape(s * b, k), linear.weight.t(), "sum", 0,
                                                              self.group_name)
        return out.view(s // self.W, b, -1)

    def forward(self, x: torch.Tensor, impl: str, caches: list | None) -> torch.Tensor:
        """``x: [s/tp, 1, h]`` (sequence parallel) or ``[s, 1, h]`` -> the same shape; ``caches``: a
        ``(k, v)`` per layer (decode) or ``None`` (prefill)."""
        for i, layer in enumerate(self.layers):
            y = layer.attention(self._column(layer.qkv, layer.norm1(x), impl), None if caches is None else caches[i])
            x = x + self._row(layer.proj, y, impl)
            gate, up = self._column(layer.fc1, layer.norm2(x), impl).chunk(2, dim=-1)
            x = x + self._row(layer.fc2, F.silu(gate) * up, impl)
        return x


# ---- one case ------------------------------------------------------------------------------------

def cases(a, W: int) -> list[dict]:
    """``[{name, phase, tokens, layout}]`` in the order they run."""
    out = [dict(name=f"prefill-{t}", phase="prefill", tokens=t, layout="sp") for t in a.prefill]
    for t in a.decode:
        sp = a.decode_layout == "sp" and t % W == 0
        out.append(dict(name=f"decode-{t}", phase="decode", tokens=t, layout="sp" if sp else "replicated"))
    return out


def case_inputs(a, case: dict, W: int, device: torch.device, dtype: torch.dtype):
    """``(x, caches, sp)`` of ``case`` on this rank: the stack's input (the same rows on every rank
    when replicated), each layer's KV cache (decode) or ``None``, and whether it is sequence parallel."""
    sp = case["layout"] == "sp"
    rows = case["tokens"] // W if sp else case["tokens"]
    gen = torch.Generator(device=device).manual_seed(1 + (dist.get_rank() if sp else 0))
    x = torch.randn(rows, 1, a.hidden, device=device, dtype=dtype, generator=gen)
    caches = None
    if case["phase"] == "decode":
        shape = (case["tokens"], a.kv_heads // W, a.context, a.hidden // a.heads)
        caches = [(torch.randn(shape, device=device, dtype=dtype, generator=gen),
                   torch.randn(shape, device=device, dtype=dtype, generator=gen)) for _ in range(a.layers)]
    return x, caches, sp


def _mode(impl: str):
    """``auto`` warms up in throughput mode: the choice a graph captures (module docstring)."""
    return dispatch.assume_mode("throughput") if impl == "auto" else contextlib.nullcontext()


def prewarm(a, stack: Stack, all_cases: list[dict], timer: Timer, dtype: torch.dtype) -> dict[str, str]:
    """One eager forward of every sequence-parallel case, the most tokens first, for each
    implementation with a workspace (fused, auto, torch's): the workspaces reach their largest size
    before any graph holds them (they cannot grow after), and ``auto`` measures every key. Returns
    ``{impl: why it failed}`` (agreed over the ranks)."""
    sp_cases = sorted((c for c in all_cases if c["layout"] == "sp"), key=lambda c: -c["tokens"])
    failed = {}
    for impl in (i for i in a.impls if i != "sequential"):
        with agreed(timer) as verdict:  # a failure drops the impl on every rank
            for case in sp_cases:
                x, caches, _ = case_inputs(a, case, stack.W, timer.device, dtype)
                stack.configure(impl, True)
                with torch.no_grad(), _mode(impl):
                    stack(x, impl, caches)
            fluxlite.synchronize()
            timer.sync()
        if verdict.why:
            failed[impl] = verdict.why
            if impl != TORCH:
                fluxlite.release_workspaces()
    return failed


def forwards(a, stack: Stack, case: dict, timer: Timer, dtype: torch.dtype) -> tuple[dict, dict, dict, torch.Tensor]:
    """``({impl: fn(_) -> output}, {impl: why it failed}, {impl: whether fn replays a CUDA graph}, ref)``
    for ``case``, each warmed up (and captured): the same input, weights and layout for every impl;
    ``ref``: the output of an eager sequential forward (what a captured forward must give too)."""
    x, caches, sp = case_inputs(a, case, stack.W, timer.device, dtype)
    stack.configure("sequential", sp)
    with torch.no_grad():
        ref = stack(x, "sequential", caches)
    fns, failed, graphed = {}, {}, {}
    for impl in (i for i in a.impls if sp or i != TORCH):
        def fwd(_x=None, impl=impl):
            stack.configure(impl, sp)
            with torch.no_grad():
                return stack(x, impl, caches)

        with agreed(timer) as verdict:  # a failure drops the impl on every rank
            with _mode(impl):
                for _ in range(a.warmup):
                    fwd()
            fluxlite.synchronize()
            timer.sync()
            if timer.cuda and not a.eager:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = fwd()
                fns[impl] = lambda _x, graph=graph, out=out: (graph.replay(), out)[1]
            else:
                fns[impl] = fwd
            graphed[impl] = timer.cuda and not a.eager
        if verdict.why:
            failed[impl] = verdict.why
            drop_workspace_users(fns, failed, impl)
    return fns, failed, graphed, ref


def drop_workspace_users(fns: dict, failed: dict, culprit: str) -> None:
    """After ``culprit`` failed: a failed fluxlite call leaves its workspace poisoned, so every
    workspace is released, and with them every callable that may use one (fused, auto: their graphs
    replay into its buffers) is dropped too. torch's op fails alone."""
    fns.pop(culprit, None)
    if culprit == TORCH:
        return
    for impl in [i for i in fns if i in ("fused", "auto")]:
        del fns[impl]
        failed[impl] = f"dropped: the workspaces were released after {culprit} failed"
    fluxlite.release_workspaces()


def auto_choices(a, tp, case: dict, dtype: torch.dtype, device: torch.device) -> dict:
    """What ``auto`` chose for each linear layer's op in ``case``, per mode: the four layers' in a
    sequence-parallel case; the Row layers' GEMM-AllReduce in a replicated one (its Column layers
    are local matmuls)."""
    W, d, t = tp.world_size, a.hidden // a.heads, case["tokens"]
    e = lambda *shape: torch.empty(shape, device=device, dtype=dtype)  # noqa: E731
    row = "gemm_rs" if case["layout"] == "sp" else "gemm_ar"
    ops = dict(qkv=("ag_gemm", e(t // W, a.hidden), e((a.heads + 2 * a.kv_heads) * d // W, a.hidden)),
               proj=(row, e(t, a.heads * d // W), e(a.hidden, a.heads * d // W)),
               fc1=("ag_gemm", e(t // W, a.hidden), e(2 * a.ffn // W, a.hidden)),
               fc2=(row, e(t, a.ffn // W), e(a.hidden, a.ffn // W)))
    if row == "gemm_ar":
        ops = {name: ops[name] for name in ("proj", "fc2")}
    out = {}
    for name, (op, x, w) in ops.items():
        key = dispatch.Key.of(op, tp, x, w, t)
        out[name] = {}
        for mode in dispatch.CALL_MODES:
            with dispatch.assume_mode(mode):
                choice = dispatch.remembered(key)
            out[name][mode] = None if choice is None else f"{choice.label} ({choice.source})"
    return out


RATIO_MODES = ("latency", "throughput")
"""The modes whose per-round ratio to sequential gets :func:`fluxlite.dispatch.paired_bounds`: the
round's forward over sequential's in the same round (each the max over the ranks), the bounds of
their median at 95% each side; with too few rounds for bounds (under 5), infinite (``null``)."""


def run_case(a, stack: Stack, case: dict, timer: Timer, dtype: torch.dtype) -> dict:
    fns, failed, graphed, ref = forwards(a, stack, case, timer, dtype)
    outputs, more = run_each_once(timer, fns, None)  # releases the workspaces if one failed
    for impl, why in more.items():
        failed[impl] = why
        drop_workspace_users(fns, failed, impl)
    outputs = {impl: out for impl, out in outputs.items() if impl in fns}
    base_out = outputs.get("sequential", ref)
    names = list(outputs)
    errs = timer.max_over_ranks([rel_err(outputs[i], against) for against in (base_out, ref) for i in names])
    errors, eager_errors = dict(zip(names, errs[:len(names)])), dict(zip(names, errs[len(names):]))
    del outputs, base_out, ref
    samples, batch = time_samples(timer, fns, [None], rounds=a.rounds, warmup=1, batch_ms=20.0, max_batch=20,
                                  min_sleep_ms=5.0 if timer.cuda else 0.0)
    times = medians(timer, samples)
    paired = per_round(timer, samples, list(samples), RATIO_MODES)  # each round's max over the ranks
    fluxlite.synchronize()
    L, base = a.layers, times.get("sequential")
    rows = {}
    for impl, t in times.items():
        bounds = {f"{mode}_vs_sequential_bounds": list(dispatch.paired_bounds(paired[impl][mode],
                                                                              paired["sequential"][mode])[::2])
                  if base else [math.nan, math.nan] for mode in RATIO_MODES}
        rows[impl] = dict(
            latency_ms_per_layer=t["latency"] / L, throughput_ms_per_layer=t["throughput"] / L,
            latency_event_ms_per_layer=t["latency_event"] / L, host_ms_per_forward=t["host"],
            latency_vs_sequential=t["latency"] / base["latency"] if base else math.nan,
            throughput_vs_sequential=t["throughput"] / base["throughput"] if base else math.nan, **bounds,
            rel_err_vs_sequential=errors.get(impl, math.nan),
            rel_err_vs_eager_sequential=eager_errors.get(impl, math.nan), graph=graphed.get(impl, False))
    return dict(case, results=rows, failed=failed, batch=batch,
                auto_choices=auto_choices(a, timer.tp, case, dtype, timer.device) if "auto" in a.impls else {})


# ---- the report ----------------------------------------------------------------------------------

def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke run, not a benchmark)"


def meta(a, tp, device: torch.device) -> dict:
    return dict(
        run_environment(tp, device), device=_device_name(device),
        command=" ".join([os.path.basename(sys.executable), *sys.argv]), dtype=a.dtype, layers=a.layers,
        widths=dict(hidden=a.hidden, ffn=a.ffn, heads=a.heads, kv_heads=a.kv_heads, context=a.context),
        graphs=device.type == "cuda" and not a.eager, rounds=a.rounds, warmup=a.warmup, impls=list(a.impls),
        env={k: os.environ[k] for k in (*NO_MULTICAST_ENV, "FLUXLITE_AUTO", "FLUXLITE_AUTO_MODE") if k in os.environ})


def table(m: dict, rows: list[dict]) -> str:
    lines = [f"Llama-style decoder stack, forward: {m['layers']} layers, hidden {m['widths']['hidden']}, ffn "
             f"{m['widths']['ffn']}, heads {m['widths']['heads']}/{m['widths']['kv_heads']}, {m['dtype']}, "
             f"TP={m['world_size']}, {m['device']}, {'CUDA graphs' if m['graphs'] else 'eager'}; ms per layer, "
             f"medians of {m['rounds']} rounds, max over ranks",
             f"{'case':>13} {'layout':>10} {'impl':>15} {'latency':>9} {'vs seq':>7} {'95%':>11} {'thruput':>9} "
             f"{'vs seq':>7} {'95%':>11} {'rel err':>8} {'vs eager':>8}"]
    for r in rows:
        for impl, x in r["results"].items():
            lines.append(f"{r['name']:>13} {r['layout']:>10} {impl:>15} {x['latency_ms_per_layer']:9.4f} "
                         f"{x['latency_vs_sequential']:7.3f} {bounds_span(x['latency_vs_sequential_bounds']):>11} "
                         f"{x['throughput_ms_per_layer']:9.4f} {x['throughput_vs_sequential']:7.3f} "
                         f"{bounds_span(x['throughput_vs_sequential_bounds']):>11} {x['rel_err_vs_sequential']:8.1e} "
                         f"{x['rel_err_vs_eager_sequential']:8.1e}")
        for impl, why in r["failed"].items():
            lines.append(f"{r['name']:>13} {r['layout']:>10} {impl:>15} FAILED: {why}")
    lines.append("vs seq: the implementation's time / sequential's (below 1: faster); 95%: bounds of the median of "
                 "its per-round ratios to sequential's, each side at 95% (- with too few rounds); rel err: its output "
                 "against sequential's (norm-relative); vs eager: against an eager sequential forward's")
    return "\n".join(lines)



def main(argv=None) -> int:
    a = parse_args(argv)
    no_nvlink_multicast()
    tp, device = init_ranks(None if a.device == "cuda" else "gloo", torch_symm_mem=TORCH in a.impls)
    dtype = DTYPES[a.dtype]
    timer = Timer(tp, device)
    stack = Stack(a, tp, dtype, device)
    all_cases = cases(a, tp.world_size)
    failed = {}
    if timer.cuda and not a.eager:
        failed["prewarm"] = prewarm(a, stack, all_cases, timer, dtype)
        a.impls = tuple(i for i in a.impls if i not in failed["prewarm"])
    rows = []
    for case in all_cases:
        rows.append(run_case(a, stack, case, timer, dtype))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if tp.rank == 0:
            r = rows[-1]
            print(f"{r['name']} ({r['layout']}): " + ", ".join(
                f"{i} {x['latency_ms_per_layer']:.4f} ms/layer ({x['latency_vs_sequential']:.3f}x)"
                for i, x in r["results"].items()) + (f"; FAILED {sorted(r['failed'])}" if r["failed"] else ""),
                flush=True)
    bad = {r["name"]: [i for i, x in r["results"].items()
                       if not max(x["rel_err_vs_sequential"], x["rel_err_vs_eager_sequential"]) <= a.max_rel_err]
           for r in rows}
    bad = {name: impls for name, impls in bad.items() if impls}
    failed = {name: f for name, f in {**failed, **{r["name"]: r["failed"] for r in rows}}.items() if f}
    if tp.rank == 0:
        m = meta(a, tp, device)
        print(table(m, rows), flush=True)
        if bad:
            print(f"FAIL: outputs off sequential's by more than {a.max_rel_err:g}: {bad}", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(no_nan(dict(meta=m, config={k: v for k, v in vars(a).items()}, cases=rows, accurate=not bad,
                                      failed=failed)), f, indent=1)
    timer.align()
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 1 if bad or any(impl != TORCH for f in failed.values() for impl in f) else 0


if __name__ == "__main__":
    sys.exit(main())
