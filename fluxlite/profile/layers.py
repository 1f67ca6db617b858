"""Per-layer timings of a real model's fluxlite layers: forward and backward op time per step, and
every ``sample_every`` steps what the sequential implementation would take on the same inputs.

    with fluxlite.profile.layer_timings(model, sample_every=10) as timings:
        for step in range(steps):
            loss = model(batch).backward(); opt.step()
            timings.step()                    # closes the step's records
    print(timings.table()); timings.save("layer_timings.json")

How it measures, from outside the layers (module hooks and autograd-node hooks, no edits to them):
- **forward:** a forward pre-hook and a forward hook on every ``ColumnParallelLinear`` /
  ``RowParallelLinear`` (the layer's whole forward, its communication included);
- **backward:** a pre-hook and a hook on the layer's autograd node (its dgrad, wgrad and their
  communication);
- **sequential sample:** at steps ``sample_every - 1``, ``2*sample_every - 1``, ... the forward hook
  runs the layer once more with ``overlap="sequential"`` on a detached copy of its input, and its
  backward through ``torch.autograd.grad`` (nothing is accumulated into ``.grad``). Layers whose
  weight accumulates into a Megatron ``main_grad`` are not sampled (their backward would write there).

Times are CUDA events on GPU (resolved at :meth:`LayerTimings.step`) and ``perf_counter`` on CPU,
summed over a layer's calls in a step. Every rank must call :meth:`LayerTimings.step` at the same
points: the samples are collectives.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

PHASES = ("forward", "backward", "sequential_forward", "sequential_backward")


class _Clock:
    """Marks: CUDA events recorded on the current stream, or ``perf_counter`` on CPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ms(self, start, end) -> float:
        return start.elapsed_time(end) if self.cuda else (end - start) * 1e3


def _is_layer_node(node) -> bool:
    """A layer's own autograd node: its eager function's (``*ParallelLinearFunctionBackward``), or, under
    sequence parallelism, the fluxlite custom op's it runs through (``GeneratedBackwardFor_fluxlite_*``)."""
    name = node.name()
    return name.endswith("ParallelLinearFunctionBackward") or name.startswith("GeneratedBackwardFor_fluxlite_")


def _layer_node(out: torch.Tensor):
    """The autograd node of the layer's own function or op (:func:`_is_layer_node`) behind ``out``."""
    frontier, seen = [out.grad_fn], set()
    for _ in range(4):  # the layer's node is at most a view or a gather away from its output
        nxt = []
        for node in frontier:
            if node is None or node in seen:
                continue
            seen.add(node)
            if _is_layer_node(node):
                return node
            nxt += [n for n, _ in node.next_functions]
        frontier = nxt
    return None


class LayerTimings:
    """Hooks on the fluxlite layers of ``model`` (see the module docstring); a context manager."""

    def __init__(self, model: torch.nn.Module, *, sample_every: int = 10) -> None:
        from ..parallel.layers import ColumnParallelLinear, RowParallelLinear

        if not isinstance(sample_every, int) or isinstance(sample_every, bool) or sample_every < 1:
            raise ValueError(f"sample_every must be a positive int, got {sample_every!r}")
        self.layers = {name: m for name, m in model.named_modules() if isinstance(m, (ColumnParallelLinear, RowParallelLinear))}
        if not self.layers:
            raise ValueError("model has no fluxlite ColumnParallelLinear/RowParallelLinear layers to time")
        self.sample_every = sample_every
        cuda = any(p.is_cuda for p in model.parameters())
        self.clock = _Clock(cuda)
        self.steps: list[dict[str, dict[str, float]]] = []
        self._pending: list[tuple[str, str, object, object]] = []  # (layer, phase, start, end)
        self._starts: dict[str, object] = {}
        self._sampling = False
        self._handles = []
        for name, module in self.layers.items():
            self._handles.append(module.register_forward_pre_hook(lambda m, args, name=name: self._forward_start(name)))
            self._handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: self._forward_end(name, m, args, out)))

    # -- hooks ---------------------------------------------------------------------------------
    def _forward_start(self, name: str) -> None:
        if not self._sampling:
            self._starts[name] = self.clock.mark()

    def _forward_end(self, name: str, module, args, output) -> None:
        if self._sampling:
            return
        self._pending.append((name, "forward", self._starts.pop(name), self.clock.mark()))
        out = output[0] if isinstance(output, tuple) else output
        node = _layer_node(out) if isinstance(out, torch.Tensor) and out.requires_grad else None
        if node is not None:
            marks = {}
            node.register_prehook(lambda grad_outputs: marks.update(start=self.clock.mark()))
            node.register_hook(lambda grad_inputs, grad_outputs: self._pending.append(
                (name, "backward", marks["start"], self.clock.mark())))
        if len(self.steps) % self.sample_every == self.sample_every - 1:
            self._sample(name, module, args[0])

    def _sample(self, name: str, module, x: torch.Tensor) -> None:
        """Time the layer once more with the sequential implementation (forward, then backward)."""
        weight = getattr(module, "weight", None)
        if weight is None or hasattr(weight, "grad_added_to_main_grad"):
            return
        saved, self._sampling = module.overlap, True
        module.overlap = "sequential"
        try:
            with torch.enable_grad():
                x = x.detach().requires_grad_(x.requires_grad)
                t0 = self.clock.mark()
                out = module(x)[0]
                t1 = self.clock.mark()
                wrt = [t for t in (x, *module.parameters()) if t.requires_grad]
                torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)  # a skipped bias is unused
                t2 = self.clock.mark()
        finally:
            module.overlap, self._sampling = saved, False
        self._pending += [(name, "sequential_forward", t0, t1), (name, "sequential_backward", t1, t2)]

    # -- steps and reports ---------------------------------------------------------------------
    def step(self) -> None:
        """Close the current step: resolve its times (on GPU after a sync) and start the next."""
        if self.clock.cuda:
            torch.cuda.synchronize()
        record: dict[str, dict[str, float]] = {}
        for name, phase, start, end in self._pending:
            per_layer = record.setdefault(name, {})
            per_layer[phase] = per_layer.get(phase, 0.0) + self.clock.ms(start, end)
        self._pending.clear()
        self.steps.append(record)

    def summary(self) -> dict:
        """Per layer: the median over steps (the first, warm-up step left out when there are more)
        of each phase in ms, and the sequential time over the overlapped one (``speedup``)."""
        steps = self.steps[1:] if len(self.steps) > 1 else self.steps
        layers = {}
        for name, module in self.layers.items():
            row = {"kind": type(module).__name__, "overlap": module.overlap}
            for phase in PHASES:
                values = [s[name][phase] for s in steps if phase in s.get(name, {})]
                if not values and phase.startswith("sequential"):  # sampled at the first step only
                    values = [s[name][phase] for s in self.steps if phase in s.get(name, {})]
                row[f"{phase}_ms"] = statistics.median(values) if values else None
            if row["sequential_forward_ms"] is not None and row["forward_ms"] and row["backward_ms"]:
                row["speedup"] = ((row["sequential_forward_ms"] + row["sequential_backward_ms"])
                                  / (row["forward_ms"] + row["backward_ms"]))
            layers[name] = row
        return dict(steps=len(self.steps), sample_every=self.sample_every, layers=layers)

    def table(self) -> str:
        s = self.summary()
        lines = [f"fluxlite layer timings: median ms over {s['steps']} steps (sequential sampled every "
                 f"{s['sample_every']} steps)",
                 f"{'layer':<28} {'kind':<21} {'fwd':>8} {'bwd':>8} {'seq fwd':>8} {'seq bwd':>8} {'speedup':>8}"]

        def cell(v, fmt="{:.3f}"):
            return "-" if v is None else fmt.format(v)

        for name, r in s["layers"].items():
            lines.append(f"{name:<28} {r['kind']:<21} {cell(r['forward_ms']):>8} {cell(r['backward_ms']):>8} "
                         f"{cell(r['sequential_forward_ms']):>8} {cell(r['sequential_backward_ms']):>8} "
                         f"{cell(r.get('speedup'), '{:.2f}x'):>8}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> None:
        """The summary and every step's records, as JSON."""
        Path(path).write_text(json.dumps(dict(self.summary(), per_step=self.steps), indent=1))

    def close(self) -> None:
        """Remove the hooks (a step left open is closed first)."""
        if self._pending:
            self.step()
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> LayerTimings:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def layer_timings(model: torch.nn.Module, *, sample_every: int = 10) -> LayerTimings:
    """Start timing ``model``'s fluxlite layers (use it as a context manager; see the module docstring)."""
    return LayerTimings(model, sample_every=sample_every)
