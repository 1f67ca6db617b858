"""``ColumnParallelLinear(activation=...)``: the fused epilogue's activation on the layer, forward and
backward, against a float64 torch reference (no fluxlite code in it), on 2 and 4 gloo ranks.

Every rank's output is ``act(X W_rᵀ + b_r)`` (SwiGLU: ``silu(gate) * up`` from the rank's gate rows
then up rows, Megatron's gated fc1); the loss is ``Σ_r <out_r, G_r>`` with a fresh random ``G_r``.
Compared: the output, the input grad (this rank's rows under sequence parallelism, else the whole,
all-reduced grad), the weight grad and the bias grad. float64 on CPU: tolerance 1e-9 relative.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from .dist_utils import run_ranks
from .numerics import poison_empty_tensors

ACTS = ("gelu", "gelu_tanh", "silu", "swiglu")
TOL = 1e-9


def _act(z: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu":
        return F.gelu(z)
    if act == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if act == "silu":
        return F.silu(z)
    gate, up = z.chunk(2, dim=-1)
    return F.silu(gate) * up


def _close(got: torch.Tensor, want: torch.Tensor, what: str, case: dict, failures: list, tol: float) -> None:
    got = got.double().cpu()
    err = ((got - want).norm() / want.norm()).item() if want.norm() > 0 else got.abs().max().item()
    if not err < tol:  # NaN fails too
        failures.append(f"{what}: relative error {err:.2e} in {case}")


def _cases(rank, W, dtype=torch.float64, device="cpu", tol=TOL, size=None):
    """Every activation x sequence parallelism x overlap on a layer of ``dtype`` on ``device``; the
    data is drawn in float64 on the CPU (the reference's), the layer gets it rounded to ``dtype``."""
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig

    poison_empty_tensors()  # every torch.empty the layer makes starts as NaN: an unwritten element fails
    failures: list[str] = []
    s, b, K, N = size or (4 * W, 3, 24, 8 * W)  # N: the layer's output_size (2 * ffn for SwiGLU)
    for n, (act, sp, overlap) in enumerate(itertools.product(ACTS, (True, False), ("fused", "sequential"))):
        case = dict(act=act, sp=sp, overlap=overlap, W=W)
        gen = torch.Generator().manual_seed(100 + n)  # the same global data on every rank
        X = torch.randn(s, b, K, dtype=torch.float64, generator=gen)
        master = torch.randn(N, K, dtype=torch.float64, generator=gen) / K**0.5
        bias = torch.randn(N, dtype=torch.float64, generator=gen)
        n_local = N // W
        out_local = n_local // 2 if act == "swiglu" else n_local
        Gs = [torch.randn(s, b, out_local, dtype=torch.float64, generator=gen) for _ in range(W)]
        cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=dtype, use_cpu_initialization=True)
        layer = ColumnParallelLinear(K, N, config=cfg, init_method=torch.nn.init.zeros_, bias=True,
                                     gather_output=False, skip_bias_add=False, overlap=overlap,
                                     activation=act).to(device)
        rows = slice(rank * n_local, (rank + 1) * n_local)
        with torch.no_grad():
            layer.weight.copy_(master[rows])
            layer.bias.copy_(bias[rows])
        seq = slice(rank * s // W, (rank + 1) * s // W)
        x = (X[seq] if sp else X).to(device, dtype, copy=True).requires_grad_()
        out, out_bias = layer(x)
        assert out_bias is None
        out.backward(Gs[rank].to(device, dtype))

        Xr, Mr, Br = X.clone().requires_grad_(), master.clone().requires_grad_(), bias.clone().requires_grad_()
        ref_outs = [_act(Xr @ Mr[p * n_local:(p + 1) * n_local].t() + Br[p * n_local:(p + 1) * n_local], act)
                    for p in range(W)]
        sum((o * g).sum() for o, g in zip(ref_outs, Gs)).backward()
        _close(out, ref_outs[rank].detach(), "output", case, failures, tol)
        _close(x.grad, Xr.grad[seq] if sp else Xr.grad, "input grad", case, failures, tol)
        _close(layer.weight.grad, Mr.grad[rows], "weight grad", case, failures, tol)
        if sp:  # a partial sum over this rank's rows until Megatron's all-reduce of SP grads
            from fluxlite.parallel import allreduce_sequence_parallel_grads

            allreduce_sequence_parallel_grads(layer)
        _close(layer.bias.grad, Br.grad[rows], "bias grad", case, failures, tol)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world_size", [2, 4])
def test_column_layer_activations_forward_and_backward(world_size):
    run_ranks(_cases, world_size, timeout_s=60)


def test_activation_arguments_are_checked_before_anything_runs():
    run_ranks(_bad_arguments, 1)


def _bad_arguments(rank, W):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig

    cfg = ModelParallelConfig(sequence_parallel=False, params_dtype=torch.float32, use_cpu_initialization=True)
    kw = dict(config=cfg, init_method=torch.nn.init.zeros_, bias=True)
    with pytest.raises(ValueError, match="activation must be one of"):
        ColumnParallelLinear(8, 8, activation="relu", **kw)
    with pytest.raises(ValueError, match="skip_bias_add must be False"):
        ColumnParallelLinear(8, 8, activation="gelu", skip_bias_add=True, **kw)
    with pytest.raises(ValueError, match="even output_size"):
        ColumnParallelLinear(8, 7, activation="swiglu", **kw)
