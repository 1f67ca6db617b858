#!/usr/bin/env python
"""Train a small GPT whose attention and MLP GEMMs are fluxlite tensor-parallel layers.

    torchrun --standalone --nproc-per-node 2 scripts/train_gpt.py                 # CPU (gloo) or GPU (nccl)
    torchrun --standalone --nproc-per-node 2 scripts/train_gpt.py --check         # + single-process twin

It runs under torchrun only (without it, it says how to launch it and exits with status 2).

The model: token + position embeddings, pre-norm blocks (LayerNorm -> QKV ColumnParallelLinear ->
causal attention over this rank's heads -> proj RowParallelLinear; LayerNorm -> fc1
ColumnParallelLinear -> GELU -> fc2 RowParallelLinear), a final LayerNorm and an LM head
(ColumnParallelLinear over the vocabulary, gathered). With sequence parallelism (the default) the
activations between the TP regions are split along the sequence: [s/tp, b, h] per rank.

The data is synthetic and learnable: each sequence follows a fixed random successor table with a
little noise, drawn from a generator seeded by (seed, step), so every rank and the twin see the same
batches. Nothing is downloaded.

``--check`` then builds the same model on rank 0 with plain ``nn.Linear`` layers, the same seed (so
the same master weights, drawn in the same order) and the same data, trains it on that one process,
and asserts that the two loss curves agree step by step: to ``--tol`` (default 2e-5 relative in
float32, 2e-2 in bfloat16; bf16 on CPU agrees to ~1e-3 over 30 steps). Where they drift further apart,
as AdamW makes bf16 runs on GPUs do, a float64 twin decides: the TP run must stay as close to it as
the plain single-process run does (see ``NOISE_FACTOR``). Every rank exits non-zero if they do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import fluxlite
from fluxlite._cli import ArgumentParser, positive, threads_per_rank
from fluxlite._validate import IMPLS
from fluxlite.profile import layer_timings
from fluxlite.parallel import (
    ColumnParallelLinear,
    ModelParallelConfig,
    RowParallelLinear,
    allreduce_sequence_parallel_grads,
    scatter_to_sequence_parallel_region,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_TOL = {"fp32": 2e-5, "bf16": 2e-2, "fp16": 1e-2}
MIN_CHECK_STEPS = 20


LAUNCH = "torchrun --standalone --nproc-per-node 2 scripts/train_gpt.py"


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows the defaults, but not ``None``: those options say in their help what they default to."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="train_gpt.py", description=__doc__.split("\n\n")[0], formatter_class=_Help)
    size = positive(int)
    p.add_argument("--layers", type=size, default=2, help="transformer blocks")
    p.add_argument("--hidden", type=size, default=64, help="hidden size (a multiple of --heads)")
    p.add_argument("--heads", type=size, default=4, help="attention heads (a multiple of the ranks)")
    p.add_argument("--ffn", type=size, default=None, help="MLP width, a multiple of the ranks (default 4 * hidden)")
    p.add_argument("--vocab", type=size, default=128, help="vocabulary size (a multiple of the ranks)")
    p.add_argument("--seq", type=size, default=32,
                   help="sequence length (a multiple of the ranks under sequence parallelism)")
    p.add_argument("--batch", type=size, default=4, help="sequences per step")
    p.add_argument("--steps", type=size, default=30, help="training steps")
    p.add_argument("--lr", type=positive(float), default=3e-3, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=positive(float, zero_ok=True), default=0.01, help="AdamW weight decay")
    p.add_argument("--seed", type=int, default=1234, help="seed of the weights and of the synthetic data")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: bf16 on GPU, fp32 on CPU")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the ranks run (auto: the GPUs when CUDA is there)")
    p.add_argument("--overlap", choices=IMPLS, default="auto",
                   help="implementation of fluxlite's AG-GEMM / GEMM-RS inside the layers")
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=True,
                   help="split the activations between the TP regions along the sequence")
    p.add_argument("--check", action="store_true", help="compare with a single-process nn.Linear twin")
    p.add_argument("--tol", type=positive(float), default=None, help="relative loss tolerance of --check (default by dtype)")
    p.add_argument("--out", default=None, help="write the losses and throughput as JSON here (rank 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (log lines instead)")
    p.add_argument("--profile", nargs="?", const="layer_timings.json", default=None, metavar="JSON",
                   help="time each fluxlite layer's forward and backward per step, and the sequential "
                        "implementation every 10 steps (fluxlite.profile.layer_timings); print the table "
                        "and save it as JSON (rank 0)")
    return p


def parse_args(argv=None):
    """Parse and check the arguments before the process group comes up: one line and exit 2 (from
    rank 0) when they are bad, or when the script runs neither under torchrun nor in a process that
    brought up the default group itself."""
    p = build_parser()
    args = p.parse_args(argv)
    if dist.is_initialized():  # called by a program that brought up the group itself
        W = dist.get_world_size()
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        W = int(os.environ["WORLD_SIZE"])
    else:
        p.error(f"run it under torchrun, e.g. {LAUNCH} [options]")
    args.ffn = args.ffn or 4 * args.hidden
    if args.check and args.steps < MIN_CHECK_STEPS:
        p.error(f"--check compares at least {MIN_CHECK_STEPS} steps; got --steps {args.steps}")
    for what, n in (("heads", args.heads), ("ffn", args.ffn), ("vocab", args.vocab)) + (
            (("seq", args.seq),) if args.sequence_parallel else ()):
        if n % W:
            p.error(f"--{what} ({n}) must be divisible by the number of ranks ({W})")
    if args.hidden % args.heads:
        p.error(f"--hidden ({args.hidden}) must be divisible by --heads ({args.heads})")
    return args


# ---- the model -----------------------------------------------------------------------------------

def init_normal(std: float):
    return lambda w: nn.init.normal_(w, mean=0.0, std=std)


class TwinColumn(nn.Module):
    """The single-process twin of ColumnParallelLinear: an nn.Linear whose weight is drawn exactly as
    the TP layer draws its master weight (fp32, ``init_method``, cast), with Megatron's returns."""

    def __init__(self, input_size, output_size, *, config, init_method, bias=True, skip_bias_add=False, **_):
        super().__init__()
        # skip_init: nn.Linear's own init would draw from the RNG and shift every later layer's draw
        self.linear = torch.nn.utils.skip_init(nn.Linear, input_size, output_size, bias=bias, dtype=config.params_dtype)
        master = torch.empty(output_size, input_size, dtype=torch.float32)
        init_method(master)
        with torch.no_grad():
            self.linear.weight.copy_(master.to(config.params_dtype))
            if bias:
                self.linear.bias.zero_()
        self.skip_bias_add = skip_bias_add

    def forward(self, x):
        if self.skip_bias_add:
            return F.linear(x, self.linear.weight), self.linear.bias
        return self.linear(x), None


TwinRow = TwinColumn


class Block(nn.Module):
    def __init__(self, a, config, parallel: bool, tp_size: int):
        super().__init__()
        Col, Row = (ColumnParallelLinear, RowParallelLinear) if parallel else (TwinColumn, TwinRow)
        extra = dict(overlap=a.overlap) if parallel else {}
        h, dt = a.hidden, config.params_dtype
        out_std = 0.02 / math.sqrt(2 * a.layers)
        self.heads_local = a.heads // tp_size
        self.head_dim = h // a.heads
        self.ln1 = nn.LayerNorm(h, dtype=dt)
        self.qkv = Col(h, 3 * h, config=config, init_method=init_normal(0.02), bias=True, gather_output=False, **extra)
        self.proj = Row(h, h, config=config, init_method=init_normal(out_std), bias=True, input_is_parallel=True,
                        skip_bias_add=True, **extra)
        self.ln2 = nn.LayerNorm(h, dtype=dt)
        self.fc1 = Col(h, a.ffn, config=config, init_method=init_normal(0.02), bias=True, gather_output=False, **extra)
        self.fc2 = Row(a.ffn, h, config=config, init_method=init_normal(out_std), bias=True, input_is_parallel=True,
                       skip_bias_add=True, **extra)

    def attention(self, x):
        qkv, _ = self.qkv(self.ln1(x))  # [s, b, 3h/tp]: per head [q | k | v], heads rank-major
        s, b = qkv.shape[:2]
        q, k, v = qkv.view(s, b, self.heads_local, 3, self.head_dim).permute(3, 1, 2, 0, 4).unbind(0)  # [b, nh, s, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out, bias = self.proj(y.permute(2, 0, 1, 3).reshape(s, b, self.heads_local * self.head_dim))
        return out + bias

    def mlp(self, x):
        hidden, _ = self.fc1(self.ln2(x))
        out, bias = self.fc2(F.gelu(hidden))
        return out + bias

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.mlp(x)


class GPT(nn.Module):
    """``parallel=True``: fluxlite layers over the default process group; ``False``: the nn.Linear twin."""

    def __init__(self, a, parallel: bool, tp_size: int, sequence_parallel: bool, dtype: torch.dtype):
        super().__init__()
        self.parallel = parallel
        self.sequence_parallel = parallel and sequence_parallel and tp_size > 1
        config = ModelParallelConfig(sequence_parallel=self.sequence_parallel, params_dtype=dtype,
                                     use_cpu_initialization=True)  # every weight drawn from the CPU RNG, in order
        h = a.hidden
        self.tok = nn.Embedding(a.vocab, h, dtype=dtype)
        self.pos = nn.Embedding(a.seq, h, dtype=dtype)
        with torch.no_grad():
            for emb in (self.tok, self.pos):
                emb.weight.copy_(torch.empty(emb.weight.shape).normal_(0.0, 0.02).to(dtype))
        self.blocks = nn.ModuleList(Block(a, config, parallel, tp_size) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(h, dtype=dtype)
        if parallel:
            self.head = ColumnParallelLinear(h, a.vocab, config=config, init_method=init_normal(0.02), bias=False,
                                             gather_output=True, overlap=a.overlap)
        else:
            self.head = TwinColumn(h, a.vocab, config=config, init_method=init_normal(0.02), bias=False)
        if self.sequence_parallel:
            # LayerNorms act on this rank's rows only: their grads are partial sums, all-reduced
            # over the TP group before the step (with the Row biases), as Megatron does.
            for name, p in self.named_parameters():
                if ".ln" in f".{name}":
                    p.sequence_parallel = True

    def forward(self, tokens, targets):
        b, s = tokens.shape
        x = (self.tok(tokens) + self.pos.weight[:s]).transpose(0, 1).contiguous()  # [s, b, h]
        if self.sequence_parallel:
            x = scatter_to_sequence_parallel_region(x)  # [s/tp, b, h]
        for block in self.blocks:
            x = block(x)
        logits, _ = self.head(self.ln_f(x))  # [s, b, vocab]: gathered over the TP group
        return F.cross_entropy(logits.float().reshape(s * b, -1), targets.t().reshape(-1))


# ---- data ----------------------------------------------------------------------------------------

def make_successors(vocab: int, seed: int) -> torch.Tensor:
    return torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))


def batch(step: int, a, successors: torch.Tensor, device):
    """Tokens ``[b, s+1]``: each follows its predecessor's successor, or (10%) a random token."""
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
    toks = torch.empty(a.batch, a.seq + 1, dtype=torch.long)
    toks[:, 0] = torch.randint(a.vocab, (a.batch,), generator=g)
    noise = torch.rand(a.batch, a.seq, generator=g) < 0.1
    rand = torch.randint(a.vocab, (a.batch, a.seq), generator=g)
    for t in range(a.seq):
        toks[:, t + 1] = torch.where(noise[:, t], rand[:, t], successors[toks[:, t]])
    toks = toks.to(device)
    return toks[:, :-1], toks[:, 1:]


# ---- training ------------------------------------------------------------------------------------

def train(model: GPT, a, device, *, label: str, show: bool, timings=None) -> tuple[list[float], float]:
    """Train ``a.steps`` steps; returns the losses and the mean tokens/s after the first step.
    ``timings``: a :class:`fluxlite.profile.LayerTimings` whose step closes after each step."""
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay, betas=(0.9, 0.95))
    successors = make_successors(a.vocab, a.seed)
    losses, times = [], []
    bar = None
    if show and not a.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=a.steps, desc=label, dynamic_ncols=True, file=sys.stderr)
    for step in range(a.steps):
        tokens, targets = batch(step, a, successors, device)
        _sync(device)
        t0 = time.perf_counter()
        loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if model.sequence_parallel:
            allreduce_sequence_parallel_grads(model)
        opt.step()
        _sync(device)
        dt = time.perf_counter() - t0
        if timings is not None:
            timings.step()
        losses.append(loss.item())
        times.append(dt)
        tok_s = a.batch * a.seq / dt
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}", tok_s=f"{tok_s:,.0f}")
            bar.update(1)
        elif show and (step % 10 == 0 or step == a.steps - 1):
            print(f"{label} step {step:4d}  loss {losses[-1]:.4f}  {tok_s:,.0f} tokens/s", flush=True)
    if bar is not None:
        bar.close()
    steady = times[1:] or times
    return losses, a.batch * a.seq * len(steady) / sum(steady)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def worst_rel_diff(losses, ref_losses) -> float:
    return max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(losses, ref_losses))


def compare(tp_losses, ref_losses, tol: float) -> tuple[bool, float]:
    worst = worst_rel_diff(tp_losses, ref_losses)
    finite = all(math.isfinite(x) for x in tp_losses + ref_losses)
    return finite and worst <= tol, worst


NOISE_FACTOR = 3.0
"""With AdamW, rounding differences grow from step to step (an update's size hardly depends on its
gradient's), so two equally valid bf16 (or GPU fp32) runs drift apart by more than one step's
rounding. When the direct comparison misses its tolerance, the check measures that drift: it trains
a float64 twin and passes if the TP run stays within NOISE_FACTOR times the distance between the
plain single-process run (same dtype) and the float64 one, i.e. if fluxlite adds no error beyond
what the dtype already makes."""


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()):
        tp = fluxlite.init()  # NCCL, or gloo when ranks share a GPU
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        tp = fluxlite.init("gloo")
        device = torch.device("cpu")
        torch.set_num_threads(threads_per_rank(tp.world_size))
    a.dtype = a.dtype or ("bf16" if device.type == "cuda" else "fp32")
    dtype = DTYPES[a.dtype]
    W, rank = tp.world_size, tp.rank

    torch.manual_seed(a.seed)
    model = GPT(a, parallel=True, tp_size=W, sequence_parallel=a.sequence_parallel, dtype=dtype).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"fluxlite GPT: {a.layers} layers, hidden {a.hidden}, {a.heads} heads, ffn {a.ffn}, vocab {a.vocab}; "
              f"TP={W} on {device.type} ({dist.get_backend()}), {a.dtype}, sequence_parallel={model.sequence_parallel}, "
              f"overlap={a.overlap}; {n_params:,} parameters per rank", flush=True)
    timings = layer_timings(model, sample_every=max(1, min(10, a.steps // 2))) if a.profile else None
    losses, tok_s = train(model, a, device, label=f"TP={W}", show=rank == 0, timings=timings)
    if timings is not None:
        timings.close()
        if rank == 0:
            print(timings.table(), flush=True)
            timings.save(a.profile)
    result = dict(args={k: v for k, v in vars(a).items()}, world_size=W, device=device.type,
                  losses=losses, tokens_per_s=tok_s)
    ok = True
    if a.check:
        tol = a.tol if a.tol is not None else DEFAULT_TOL[a.dtype]
        flag = torch.zeros(1, device=device)
        if rank == 0:
            torch.manual_seed(a.seed)
            twin = GPT(a, parallel=False, tp_size=1, sequence_parallel=False, dtype=dtype).to(device)
            ref_losses, ref_tok_s = train(twin, a, device, label="twin", show=True)
            ok, worst = compare(losses, ref_losses, tol)
            result.update(ref_losses=ref_losses, ref_tokens_per_s=ref_tok_s, tol=tol, worst_rel_diff=worst, ok=ok)
            print(f"--check: {a.steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f} (TP={W}) vs "
                  f"{ref_losses[0]:.4f} -> {ref_losses[-1]:.4f} (single process); worst relative difference "
                  f"{worst:.2e} (tolerance {tol:.0e}): {'PASS' if ok else 'beyond tolerance'}", flush=True)
            if not ok and all(math.isfinite(x) for x in losses + ref_losses):
                torch.manual_seed(a.seed)
                exact = GPT(a, parallel=False, tp_size=1, sequence_parallel=False, dtype=torch.float64).to(device)
                exact_losses, _ = train(exact, a, device, label="float64 twin", show=False)
                drift_tp, drift_twin = worst_rel_diff(losses, exact_losses), worst_rel_diff(ref_losses, exact_losses)
                ok = drift_tp <= NOISE_FACTOR * drift_twin
                result.update(exact_losses=exact_losses, drift_tp=drift_tp, drift_twin=drift_twin, ok=ok)
                print(f"--check: against a float64 twin, TP drifts {drift_tp:.2e} and the single-process "
                      f"{a.dtype} run {drift_twin:.2e} (allowed: {NOISE_FACTOR:g}x): {'PASS' if ok else 'FAIL'}",
                      flush=True)
            if not ok:
                for i, (x, y) in enumerate(zip(losses, ref_losses)):
                    print(f"  step {i:3d}  TP {x:.6f}  twin {y:.6f}  diff {x - y:+.2e}")
            if losses[-1] > losses[0] - 0.1:
                print("--check: FAIL: the loss did not go down", flush=True)
                ok = False
            flag.fill_(1.0 if ok else 0.0)
        dist.broadcast(flag, src=0)
        ok = bool(flag.item())
    if rank == 0:
        print(f"done: final loss {losses[-1]:.4f}, {tok_s:,.0f} tokens/s (TP={W})", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(result, f, indent=2, default=str)
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
