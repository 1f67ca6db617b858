"""fluxlite.parallel's training machinery on CPU ranks (gloo), against float64 references:

* the Column layer's sequence-parallel activation memory: it keeps its input rows ``[m, K]`` for the
  backward (and gathers them again there), not the gathered ``[W*m, K]``;
* ``config.gradient_accumulation_fusion``: the weight grad accumulates in fp32 into
  ``weight.main_grad`` over two micro-steps, with Megatron's return contract (a dummy grad and
  ``grad_added_to_main_grad`` when Megatron's DDP set that attribute, else no ``.grad``), and a clear
  error when ``main_grad`` is missing;
* ``allreduce_sequence_parallel_grads`` on a module, a list of modules and an iterable of parameters.

The layer numerics are in tests/test_parallel.py's matrix; Megatron's own
DDP and ``finalize_model_grads`` with these layers are in tests/test_parallel_megatron.py and
tests/test_megatron_ddp_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from tests.dist_utils import run_ranks
from tests.test_parallel import SEED, _data, _init, _reference, _seed_msg

S, B, K, N = 8, 3, 8, 16  # a Column layer maps K -> N, a Row layer N -> K; S divisible by 2 and 4
MAIN_GRAD_TOL = dict(rtol=2e-6, atol=2e-5)  # fp32 accumulation of exactly representable products
BF16_TOL = dict(rtol=2e-2, atol=5e-2)  # a bf16 .grad (the bias's): rounded sums of O(1) values


def _layer(kind: str, sp: bool, overlap: str, dtype, seed: int, fusion: bool, **extra):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=dtype, use_cpu_initialization=True,
                              gradient_accumulation_fusion=fusion)
    common = dict(config=cfg, init_method=_init(seed), bias=True, keep_master_weight_for_test=True, overlap=overlap)
    if kind == "Column":
        return ColumnParallelLinear(K, N, **common, **extra)
    return RowParallelLinear(N, K, input_is_parallel=True, skip_bias_add=False, **common, **extra)


def _micro_step(layer, rank: int, W: int, sp: bool, dtype, seed: int):
    """Forward and backward of ``(Y * G).sum()`` on fresh data. Returns this rank's share of the
    float64 reference weight grad, and of the bias grad (the upstream grad summed over this rank's rows)."""
    from fluxlite.parallel import ColumnParallelLinear, partition_index

    column = isinstance(layer, ColumnParallelLinear)
    X, G = _data(seed, dtype, (S, B, layer.input_size), (S, B, layer.output_size))
    _, _, dWt, _ = _reference(X, layer.master_weight.double(), None, G, add_bias=False)
    rows = slice(rank * S // W, (rank + 1) * S // W)
    if column:
        idx = partition_index(layer.output_size, W, rank)
        x, upstream, weight_share = (X[rows] if sp else X), G[..., idx], dWt[idx]
    else:
        idx = partition_index(layer.input_size, W, rank)
        x, upstream, weight_share = X[..., idx], (G[rows] if sp else G), dWt[:, idx]
    out, _ = layer(x.to(dtype).requires_grad_())
    out.backward(upstream.to(dtype))
    return weight_share, upstream.reshape(-1, upstream.shape[-1]).sum(0)


def _fusion_case(rank, W, seed, kind, sp, overlap, dtype, ddp_hook: bool, zero_out_wgrad: bool = False):
    """Two micro-steps with ``gradient_accumulation_fusion``: ``main_grad`` (fp32, starting from
    random values) gains both weight grads; the bias grad accumulates in ``.grad`` as usual."""
    case = dict(kind=kind, W=W, sp=sp, overlap=overlap, dtype=dtype, ddp_hook=ddp_hook, zero_out_wgrad=zero_out_wgrad)
    layer = _layer(kind, sp, overlap, dtype, seed, fusion=True)
    weight = layer.weight
    start = torch.randn(weight.shape, generator=torch.Generator().manual_seed(seed + 5), dtype=torch.float32)
    weight.main_grad = start.clone()
    if ddp_hook:  # what Megatron's DDP sets on every parameter
        weight.grad_added_to_main_grad = False
        if zero_out_wgrad:
            weight.zero_out_wgrad = True
    expected_w, expected_b = start.double(), 0
    for step in range(2):
        w_share, b_share = _micro_step(layer, rank, W, sp, dtype, seed + 10 * (step + 1))
        expected_w, expected_b = expected_w + w_share, expected_b + b_share
        if ddp_hook:
            assert weight.grad_added_to_main_grad is True, case
            assert weight.grad is not None and weight.grad.shape == weight.shape and weight.grad.dtype == weight.dtype, case
            if zero_out_wgrad:
                assert not weight.grad.any(), case
            weight.grad = None  # Megatron's DDP hook: the grad is already in main_grad, so it is dropped
        else:
            assert weight.grad is None, case
    assert weight.main_grad.dtype == torch.float32, case
    torch.testing.assert_close(weight.main_grad.double(), expected_w, **MAIN_GRAD_TOL,
                               msg=lambda m: f"main_grad of {case} {_seed_msg()}: {m}")
    bias_tol = MAIN_GRAD_TOL if dtype == torch.float32 else BF16_TOL
    torch.testing.assert_close(layer.bias.grad.double(), expected_b, **bias_tol,
                               msg=lambda m: f"bias grad of {case} {_seed_msg()}: {m}")


def _missing_main_grad(rank, W, seed):
    """Fusion requested, no ``main_grad``: every rank raises ValueError in the backward before any
    communication, so the ranks stay in step (the next collective call works)."""
    for kind in ("Column", "Row"):
        layer = _layer(kind, True, "sequential", torch.float32, seed, fusion=True)
        with pytest.raises(ValueError, match="main_grad"):
            _micro_step(layer, rank, W, True, torch.float32, seed + 1)
        layer.weight.main_grad = torch.zeros(layer.weight.shape)
        w_share, _ = _micro_step(layer, rank, W, True, torch.float32, seed + 2)
        torch.testing.assert_close(layer.weight.main_grad.double(), w_share, **MAIN_GRAD_TOL)


def _saved_activations(rank, W, seed, overlap):
    """The Column layer's saved tensors under sequence parallelism: its input rows ``[m, K]``
    (re-gathered in the backward), never the gathered ``[W*m, K]``."""
    m = S // W * B
    layer = _layer("Column", True, overlap, torch.float64, seed, fusion=False)
    x = torch.randn(S // W, B, K, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + rank))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out, _ = layer(x.requires_grad_())
    activations = [shape for shape in saved if shape != tuple(layer.weight.shape)]
    assert activations == [(m, K)], (overlap, saved)
    out.sum().backward()
    assert x.grad.shape == x.shape and layer.weight.grad.shape == layer.weight.shape


def _allreduce_inputs(rank, W, seed):
    """A module, a list of modules (sharing a parameter, reduced once) and an iterable of parameters;
    ``main_grad`` is reduced where it exists; unmarked parameters and bad arguments are left alone."""
    from fluxlite.parallel import allreduce_sequence_parallel_grads

    g = torch.Generator().manual_seed(seed)
    grads = torch.randn(W, 3, 5, dtype=torch.float64, generator=g)  # rank p's grads: grads[p]

    def fresh():
        a, b = torch.nn.Linear(5, 1, dtype=torch.float64), torch.nn.Linear(5, 1, dtype=torch.float64)
        shared = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))
        a.shared = b.shared = shared
        for p in (a.bias, a.shared, b.bias):
            p.sequence_parallel = True
        for i, p in enumerate((a.bias, a.shared, b.bias)):
            p.grad = grads[rank, i, : p.numel()].clone()
        a.weight.grad = grads[rank, 0].clone().view(1, 5)  # not marked: left alone
        return a, b

    for form in ("modules", "params", "module"):
        a, b = fresh()
        target = {"modules": [a, b], "params": list(a.parameters()) + list(b.parameters()),
                  "module": torch.nn.ModuleList([a, b])}[form]
        assert allreduce_sequence_parallel_grads(target) == 3, form
        total = grads.sum(0)
        torch.testing.assert_close(a.bias.grad, total[0, :1], msg=form)
        torch.testing.assert_close(a.shared.grad, total[1], msg=form)
        torch.testing.assert_close(b.bias.grad, total[2, :1], msg=form)
        torch.testing.assert_close(a.weight.grad, grads[rank, 0].view(1, 5), msg=form)
    a, _ = fresh()
    a.bias.main_grad = a.bias.grad.clone().float()
    a.bias.grad = None
    assert allreduce_sequence_parallel_grads([a.bias]) == 1
    torch.testing.assert_close(a.bias.main_grad, grads.sum(0)[0, :1].float())
    for bad in (a.bias, 3, [a, "b"]):
        with pytest.raises(TypeError, match="modules"):
            allreduce_sequence_parallel_grads(bad)


def _worker(rank, W, seed, everything: bool):
    """Every case; with ``everything=False`` (4 ranks) only those where the group size matters: the
    saved activations and the sequence-parallel fp32 fusion cases."""
    _saved_activations(rank, W, seed, "sequential")
    n = 100
    for kind in ("Column", "Row"):
        for i, (sp, overlap) in enumerate(((True, "sequential"), (True, "fused"), (False, "auto"))):
            if everything or sp:
                _fusion_case(rank, W, seed + n, kind, sp, overlap, torch.float32, ddp_hook=i != 1)
            n += 100
        if everything:  # bf16 weights, fp32 main_grad: the products must be summed in fp32 to meet the tolerance
            _fusion_case(rank, W, seed + n, kind, True, "sequential", torch.bfloat16, ddp_hook=True, zero_out_wgrad=True)
        n += 100
    if everything:
        _saved_activations(rank, W, seed, "fused")
        _missing_main_grad(rank, W, seed + n)
        _allreduce_inputs(rank, W, seed + n + 100)


def test_training_machinery_2_ranks():
    run_ranks(_worker, 2, SEED, True, timeout_s=60)


def test_training_machinery_4_ranks():
    run_ranks(_worker, 4, SEED, False, timeout_s=60)
