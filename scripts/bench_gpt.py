#!/usr/bin/env python
"""A whole Megatron-core ``GPTModel`` training step (forward, loss, backward, the sequence-parallel
grad all-reduce) with fluxlite's layers in ``linear_qkv``/``linear_proj``/``linear_fc1``/``linear_fc2`` and the output
layer, against the same model with Megatron's own layers: the model-level comparison.

    PYTHONPATH=$PWD torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out bench_gpt.json

The model (defaults: Llama-3-70B's widths, ``--layers`` of its 80 layers): embedding, ``--layers``
transformer layers built from Megatron's local spec (GQA attention, SwiGLU MLP, RMSNorm; sequence
parallel, TP = the number of ranks), the final norm, the output layer and the vocab-parallel
cross-entropy. Everything but the linear layers is Megatron's in both models, and they start from
the same weights (Megatron's ``state_dict``, loaded strictly). The output layer (a vocab-parallel
``ColumnParallelLinear`` that ``GPTModel`` builds itself, not from the spec) is replaced by
fluxlite's after the model is built (:func:`swap_output_layer`); ``--output-layer megatron`` keeps
Megatron's there.

Modes: ``megatron`` (the baseline, first), then fluxlite ``overlap`` modes (``fused``, ``auto``,
``sequential``, ...). Timings as ``bench_layers.py`` (same helpers): latency (one step, ranks
aligned and synchronised around it), throughput (steps queued back to back behind a sleep), peak
memory over the warm-up; the modes interleaved; medians, then the max over ranks; each speedup with
the 95% bounds of its paired per-step speedups. Before timing, the first step's loss and grads
under each mode are compared with Megatron's.

``--no-sequence-parallel``: Megatron's default layout, every rank holding every token. The Row
layers' forward then all-reduces (fluxlite: GEMM-AllReduce) and the Column layers' backward
all-reduces its input grad.

``--ceiling`` adds a row: Megatron's step with its TP collectives made no-ops (every all-reduce,
all-gather and reduce-scatter of at least ``tokens * hidden / TP`` elements; smaller ones, such as
the loss's, still run). That is the step with all of its TP communication hidden at no cost,
the most that any overlap can give; a timing only (its loss and grads are wrong, and are not
compared).

TP communication: the step's collectives of ``[tokens, hidden]`` timed alone (NCCL, latency). Each
of the swapped layers' ``L`` transformer layers makes, per step, under sequence parallelism 6
all-gathers and 4 reduce-scatters (forward: 2 AG, 2 RS; backward: the Row layers' grad AG, the
Column layers' dgrad RS and input re-gather), the output layer 2 AG and 1 RS (a Column layer's) and
the embedding 1 AG and 1 RS; without it, 4 all-reduces (forward: 2 Row outputs; backward: 2 Column
input grads), and the output layer and the embedding add one each. "In the swapped layers" counts
the output layer's where it is fluxlite's. Reported: that sum, and how much of it a mode hides
beyond Megatron's own overlap, ``T_megatron - T_mode``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fluxlite._cli import ArgumentParser
import fluxlite
from bench_layers import (NORM_EPS, _device_name, _megatron_parallel_state, _peak_gib, _sync, add_step_args, all_ranks,
                          interleaved_timings, paired_speedup_bounds, rel_err)
from fluxlite._sequential import all_gather_rows, reduce_scatter_rows
from fluxlite.demo import Timer
from fluxlite.profile.report import bounds_span, no_nan
from fluxlite.parallel import allreduce_sequence_parallel_grads


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_step_args(p, modes="megatron,fused,auto", dtypes=("bf16", "fp32"), warmup=3, iters=10, rounds=3, steps=3)
    p.add_argument("--layers", type=int, default=2, help="transformer layers (Llama-3-70B has 80)")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--output-layer", choices=("fluxlite", "megatron"), default="fluxlite",
                   help="whose ColumnParallelLinear the fluxlite model's output layer is")
    p.add_argument("--ceiling", action="store_true",
                   help="also time Megatron's step with its TP collectives skipped: the most that overlap can give")
    p.add_argument("--max-rel-err", type=float, default=5e-2,
                   help="exit 1 if a mode's first-step loss or any grad differs from Megatron's by more (norm-relative)")
    return p.parse_args(argv)


class SPRMSNorm(torch.nn.RMSNorm):
    """Megatron's norm contract ``(config, hidden_size, eps)``, with its weight marked sequence
    parallel (Megatron's local spec's torch norm refuses sequence parallelism; apex is not needed)."""

    def __init__(self, config, hidden_size: int, eps: float = NORM_EPS, **_):
        super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
        self.weight.sequence_parallel = config.sequence_parallel


def build_gpt(a, W: int, dtype: torch.dtype, device, overlap: str | None):
    """The GPTModel, its linear layers Megatron's (``overlap=None``) or fluxlite's."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    import fluxlite.parallel as FP

    cfg = TransformerConfig(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads, num_query_groups=a.kv_heads,
        ffn_hidden_size=a.ffn, tensor_model_parallel_size=W, sequence_parallel=a.sequence_parallel,
        use_cpu_initialization=device.type == "cpu", params_dtype=dtype, bf16=dtype == torch.bfloat16,
        hidden_dropout=0.0, attention_dropout=0.0, add_bias_linear=False, gated_linear_unit=True,
        activation_func=F.silu, layernorm_epsilon=NORM_EPS,
    )
    spec = get_gpt_layer_local_spec()
    sm = spec.submodules
    sm.input_layernorm = sm.pre_mlp_layernorm = SPRMSNorm
    if overlap is not None:
        col = ModuleSpec(module=FP.ColumnParallelLinear, params={"overlap": overlap})
        row = ModuleSpec(module=FP.RowParallelLinear, params={"overlap": overlap})
        sm.self_attention.submodules.linear_qkv, sm.self_attention.submodules.linear_proj = col, row
        # the MLP's submodules: a ModuleSpec's (0.16), or a functools.partial(MLP, submodules=...)'s (0.19)
        mlp = sm.mlp.submodules if hasattr(sm.mlp, "submodules") else sm.mlp.keywords["submodules"]
        mlp.linear_fc1, mlp.linear_fc2 = col, row
    block = TransformerBlockSubmodules(layer_specs=[spec] * a.layers, layer_norm=SPRMSNorm)
    torch.manual_seed(1234)
    model = GPTModel(config=cfg, transformer_layer_spec=block, vocab_size=a.vocab, max_sequence_length=a.seq)
    qkv = model.decoder.layers[0].self_attention.linear_qkv
    if isinstance(qkv, FP.ColumnParallelLinear) != (overlap is not None):
        raise RuntimeError(f"linear_qkv is {type(qkv).__name__}: the layer spec was not applied")
    if overlap is not None and a.output_layer == "fluxlite":
        swap_output_layer(model, cfg, overlap)
    return model.to(device=device, dtype=dtype)  # as Megatron's Float16Module does for bf16


def swap_output_layer(model, cfg, overlap: str) -> None:
    """Replace ``model.output_layer`` (Megatron's ``ColumnParallelLinear`` over the vocabulary, which
    ``GPTModel`` builds outside the layer spec) with fluxlite's, built with the same arguments: under
    sequence parallelism its forward is then a fused AG-GEMM and its backward's dgrad a GEMM-RS. The
    parameter names stay ``output_layer.weight``, so Megatron's ``state_dict`` loads into it."""
    import fluxlite.parallel as FP

    old = model.output_layer
    model.output_layer = FP.ColumnParallelLinear(
        cfg.hidden_size, model.vocab_size, config=cfg, init_method=cfg.init_method, bias=False, skip_bias_add=False,
        gather_output=not model.parallel_output, skip_weight_param_allocation=old.weight is None, overlap=overlap)


def set_overlap(model, mode: str):
    for module in model.modules():
        if hasattr(module, "overlap"):  # fluxlite's parallel layers
            module.overlap = mode
    return model


def make_batch(a, device) -> dict:
    g = torch.Generator().manual_seed(99)  # the same tokens on every rank (data parallel size 1)
    tokens = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=g).to(device)
    pos = torch.arange(a.seq, device=device).unsqueeze(0).expand(a.batch, a.seq)
    mask = torch.ones(1, 1, a.seq, a.seq, dtype=torch.bool, device=device).tril().logical_not()
    return dict(input_ids=tokens[:, :-1], position_ids=pos, attention_mask=mask, labels=tokens[:, 1:])


def step(model, batch) -> torch.Tensor:
    for p in model.parameters():
        p.grad = None
    loss = model(**batch).float().mean()
    loss.backward()
    allreduce_sequence_parallel_grads(model)  # what Megatron's finalize_model_grads does under SP
    return loss.detach()


_COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "_all_gather_base",
                "_reduce_scatter_base")


class _Skipped:
    """The handle of a skipped asynchronous collective."""

    def wait(self, *args, **kwargs) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class TPCollectivesSkipped:
    """A context within which ``torch.distributed``'s collectives whose largest tensor has
    ``min_elements`` or more return at once, their outputs untouched (counted by name in
    :attr:`skipped`); smaller ones run. Also replaced where a ``megatron`` module keeps its own name
    for one (Megatron binds the all-gather and reduce-scatter functions at import). The places are
    found once, here (after Megatron is imported), so entering costs a few attribute writes, not a
    search of the modules inside a timed step."""

    def __init__(self, min_elements: int) -> None:
        self.skipped: dict[str, int] = {}
        real = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}
        replacement = {id(fn): self._skipping(name, fn, min_elements) for name, fn in real.items()}
        owners = [dist] + [m for name, m in list(sys.modules.items()) if name.startswith("megatron") and m is not None]
        self.places = [(owner, attr, value, replacement[id(value)]) for owner in owners
                       for attr, value in list(vars(owner).items()) if callable(value) and id(value) in replacement]

    def _skipping(self, name: str, fn, min_elements: int):
        def collective(*args, async_op: bool = False, **kwargs):
            sizes = [t.numel() for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            if sizes and max(sizes) >= min_elements:
                self.skipped[name] = self.skipped.get(name, 0) + 1
                return _Skipped() if async_op else None
            return fn(*args, async_op=async_op, **kwargs)
        return collective

    def __enter__(self) -> "TPCollectivesSkipped":
        for owner, attr, _, replaced in self.places:
            setattr(owner, attr, replaced)
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, fn, _ in self.places:
            setattr(owner, attr, fn)


def ceiling_step(model, batch, skip: TPCollectivesSkipped) -> torch.Tensor:
    """:func:`step` with the TP collectives skipped (:class:`TPCollectivesSkipped`): the time of a
    step whose TP communication is all hidden at no cost. Its loss and grads are wrong."""
    with skip:
        return step(model, batch)


def comm_alone_ms(a, tp, dtype: torch.dtype, device, timer: Timer, iters: int) -> dict:
    """Latency (ms, median, max over ranks) of one all-gather and one reduce-scatter (sequence
    parallel), or one all-reduce (not), of the step's ``[tokens, hidden]`` activations, alone (the
    collectives of fluxlite's sequential path, as the profiler's ``comm``), and the step's sum of
    them (module docstring)."""
    rows = a.seq * a.batch
    shard = torch.randn(rows // tp.world_size, a.hidden, device=device).to(dtype)
    full = torch.randn(rows, a.hidden, device=device).to(dtype)
    if a.sequence_parallel:
        ops = dict(all_gather=lambda: all_gather_rows(shard, tp), reduce_scatter=lambda: reduce_scatter_rows(full, tp))
    else:
        ops = dict(all_reduce=lambda: dist.all_reduce(full, group=tp.group))
    times = {}
    for name, fn in ops.items():
        fn()
        times[name] = max(all_ranks(statistics.median(timer.time_once(fn) for _ in range(iters)), device, tp.world_size))
    if a.sequence_parallel:
        per_layer = 6 * times["all_gather"] + 4 * times["reduce_scatter"]
        output, embedding = 2 * times["all_gather"] + times["reduce_scatter"], times["all_gather"] + times["reduce_scatter"]
    else:
        per_layer, output, embedding = 4 * times["all_reduce"], times["all_reduce"], times["all_reduce"]
    swapped = a.layers * per_layer + (output if a.output_layer == "fluxlite" else 0)
    return dict(times, swapped_layers=swapped, step=a.layers * per_layer + output + embedding)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpt.py needs CUDA GPUs (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    modes = a.modes.split(",")
    if modes[0] != "megatron":
        raise SystemExit(f"--modes must start with megatron (the baseline), got {a.modes!r}")
    tp = fluxlite.init(None if a.device == "cuda" else "gloo")
    W, rank = tp.world_size, tp.rank
    for what, n in (("heads", a.heads), ("kv-heads", a.kv_heads), ("ffn", a.ffn), ("seq", a.seq), ("vocab", a.vocab)):
        if n % W:
            raise SystemExit(f"--{what} ({n}) must be divisible by the number of ranks ({W})")
    device = torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    timer = Timer(device)
    _megatron_parallel_state(W, device)
    models = {"megatron": build_gpt(a, W, dtype, device, None)}
    if len(modes) > 1:
        models["fluxlite"] = build_gpt(a, W, dtype, device, modes[1])
        models["fluxlite"].load_state_dict(models["megatron"].state_dict(), strict=True)
    model_of = lambda mode: models["megatron"] if mode == "megatron" else set_overlap(models["fluxlite"], mode)  # noqa: E731
    batch = make_batch(a, device)

    errors, first = {}, None  # the first step's loss and grads against Megatron's
    for mode in modes:
        model = model_of(mode)
        snap = [step(model, batch)] + [p.grad.clone() for _, p in sorted(model.named_parameters())]
        _sync(device)
        if first is None:
            first = snap
        else:
            errors[mode] = max(rel_err(s, f) for s, f in zip(snap, first))
    del first
    # the smallest TP collective: [tokens/W, hidden]
    skip = TPCollectivesSkipped(a.seq * a.batch * a.hidden // W) if a.ceiling else None

    def run_of(mode: str):
        if mode == "ceiling":
            return functools.partial(ceiling_step, models["megatron"], batch, skip)
        return functools.partial(step, model_of(mode), batch)

    timed = modes + (["ceiling"] if a.ceiling else [])
    peak = {}
    for mode in timed:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(a.warmup):
            run_of(mode)()
        _sync(device)
        peak[mode] = _peak_gib(device)
    latency, throughput = interleaved_timings(timed, run_of, timer, a)
    _sync(device)
    results = {m: dict(latency_ms=max(all_ranks(statistics.median(latency[m]), device, W)),
                       throughput_ms=max(all_ranks(statistics.median(throughput[m]), device, W)),
                       peak_mem_gib=peak[m], max_rel_err_vs_megatron=errors.get(m, 0.0)) for m in timed}
    if a.ceiling:  # what one step skipped, by name (this rank's)
        skip.skipped.clear()
        ceiling_step(models["megatron"], batch, skip)
        results["ceiling"].update(max_rel_err_vs_megatron=None, skipped_per_step=dict(sorted(skip.skipped.items())))
    comm_ms = comm_alone_ms(a, tp, dtype, device, timer, a.iters)
    base = results["megatron"]
    for m in timed[1:]:
        r = results[m]
        r["speedup_latency"] = base["latency_ms"] / r["latency_ms"]
        r["speedup_throughput"] = base["throughput_ms"] / r["throughput_ms"]
        r["speedup_latency_bounds"] = paired_speedup_bounds(latency[timed[0]], latency[m], device, W)
        r["speedup_throughput_bounds"] = paired_speedup_bounds(throughput[timed[0]], throughput[m], device, W)
        r["hidden_vs_megatron_ms"] = base["throughput_ms"] - r["throughput_ms"]
        r["hidden_share_of_comm"] = r["hidden_vs_megatron_ms"] / comm_ms["step"]
    accurate = all(e <= a.max_rel_err for e in errors.values())
    if rank == 0:
        print(f"GPTModel step (fwd+loss+bwd), {a.layers} layers, hidden {a.hidden}, ffn {a.ffn}, heads "
              f"{a.heads}/{a.kv_heads}, vocab {a.vocab}, seq {a.seq} x batch {a.batch}, {a.dtype}, TP={W} "
              f"{'with' if a.sequence_parallel else 'without'} sequence parallelism, {_device_name(device)}; "
              f"max over ranks")
        print(f"{'mode':>10} {'latency ms':>11} {'thruput ms':>11} {'vs megatron (lat/tp)':>21} {'peak GiB':>9} "
              f"{'max rel err':>12}")
        for m, r in results.items():
            vs = f"{r.get('speedup_latency', 1):.3f} / {r.get('speedup_throughput', 1):.3f}"
            err = "-" if r["max_rel_err_vs_megatron"] is None else f"{r['max_rel_err_vs_megatron']:.2e}"
            print(f"{m:>10} {r['latency_ms']:11.2f} {r['throughput_ms']:11.2f} {vs:>21} {r['peak_mem_gib']:9.2f} "
                  f"{err:>12}")
        if a.ceiling:
            per_step = ", ".join(f"{n} {name}" for name, n in results["ceiling"]["skipped_per_step"].items())
            print(f"ceiling: Megatron's step with its TP collectives skipped ({per_step or 'none'} per step): the most "
                  f"that overlap can give this step")
        print("95% bounds of the per-step speedups over megatron (latency / throughput): " + ", ".join(
            f"{m} {bounds_span(r['speedup_latency_bounds'])} / {bounds_span(r['speedup_throughput_bounds'])}"
            for m, r in results.items() if m != "megatron"))
        print(f"TP communication of a step, collectives alone: {comm_ms['step']:.2f} ms "
              f"({comm_ms['swapped_layers']:.2f} ms in the swapped layers)")
        for m in modes[1:]:
            r = results[m]
            print(f"{m}: {r['hidden_vs_megatron_ms']:.2f} ms hidden beyond Megatron's overlap "
                  f"({100 * r['hidden_share_of_comm']:.0f}% of the step's TP communication; throughput)")
        if not accurate:
            print(f"FAIL: a mode's first step differs from Megatron's by more than {a.max_rel_err:.0e}: {errors}")
        if a.out:
            import megatron.core
            import triton

            meta = dict(torch=torch.__version__, triton=triton.__version__, megatron_core=megatron.core.__version__,
                        device=_device_name(device), world_size=W,
                        nccl=".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
                        env={k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS") if k in os.environ})
            with open(a.out, "w") as f:
                json.dump(no_nan(dict(config=vars(a), meta=meta, results=results, comm_ms=comm_ms, accurate=accurate)), f,
                          indent=2)
    fluxlite.release_workspaces()
    dist.destroy_process_group()
    return 0 if accurate else 1


if __name__ == "__main__":
    sys.exit(main())
