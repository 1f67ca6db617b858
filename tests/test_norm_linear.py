"""LayerNormColumnParallelLinear (the deferred norm folded into the AG-GEMM) against a float64
unfused reference (norm, then the full linear layer), in forward and every gradient, on 1, 2 and 4
gloo ranks, sequence parallel or not, LayerNorm and RMSNorm, deferred and not; plus the
large-mean-offset rows where deferral loses precision, and the fold's refresh when gamma trains.

Tolerances (relative norm error): fp32 1e-5; bf16 3e-2 (bf16 operands, one rounding of the folded
weight, and for the reference comparison the reference's own bf16-rounded parameters).
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import fluxlite.parallel as FP
from fluxlite.parallel.norm_linear import LayerNormColumnParallelLinear

from .dist_utils import run_ranks

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def _layer(W, norm, sp, deferred, impl, dtype, zero_centered, h=40, n=24, act=None):
    cfg = FP.ModelParallelConfig(sequence_parallel=sp, params_dtype=dtype, use_cpu_initialization=True)
    torch.manual_seed(7)
    layer = LayerNormColumnParallelLinear(h, W * n, config=cfg, init_method=torch.nn.init.normal_, bias=True,
                                          normalization=norm, eps=1e-5, zero_centered_gamma=zero_centered,
                                          deferred=deferred, overlap=impl, activation=act)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # non-trivial norm parameters and bias, the same on every rank
        layer.layer_norm_weight.copy_(torch.randn(h, generator=g) * 0.3 + (0.0 if zero_centered else 1.0))
        if layer.layer_norm_bias is not None:
            layer.layer_norm_bias.copy_(torch.randn(h, generator=g) * 0.3)
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=g))
    return layer


def _act(z, act):
    """The activation in plain torch (SwiGLU: the rank's gate columns, then its up columns)."""
    if act is None:
        return z
    if act == "swiglu":
        gate, up = z.chunk(2, dim=-1)
        return F.silu(gate) * up
    return {"gelu": F.gelu, "silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[act](z)


def _reference(x_full, layer, W, rank, norm, zero_centered, grad_full, act=None):
    """float64: act_r(norm(x) @ W_full.T + b_full) per rank's columns, its grads; this rank's slices."""
    dist = torch.distributed
    parts = [torch.empty_like(layer.weight) for _ in range(W)]
    dist.all_gather(parts, layer.weight.detach().contiguous())
    biases = [torch.empty_like(layer.bias) for _ in range(W)]
    dist.all_gather(biases, layer.bias.detach().contiguous())
    w_full = torch.cat(parts).double().requires_grad_()
    b_full = torch.cat(biases).double().requires_grad_()
    gamma = layer.layer_norm_weight.detach().double().requires_grad_()
    beta = None if layer.layer_norm_bias is None else layer.layer_norm_bias.detach().double().requires_grad_()
    x = x_full.double().requires_grad_()
    g_eff = gamma + 1 if zero_centered else gamma
    if norm == "LayerNorm":
        y = F.layer_norm(x, x.shape[-1:], g_eff, beta, 1e-5)
    else:
        y = F.rms_norm(x, x.shape[-1:], g_eff, 1e-5)
    z = y @ w_full.t() + b_full
    n = layer.weight.shape[0]
    outs = [_act(z[..., p * n : (p + 1) * n], act) for p in range(W)]
    torch.cat(outs, dim=-1).backward(grad_full.double())
    cols = slice(rank * n, (rank + 1) * n)
    return dict(out=outs[rank].detach(), x=x.grad, w=w_full.grad[cols], b=b_full.grad[cols], gamma=gamma.grad,
                beta=None if beta is None else beta.grad)


def _case(rank, W, norm, sp, deferred, impl, dtype, zero_centered, offset, failures, act=None):
    layer = _layer(W, norm, sp, deferred, impl, dtype, zero_centered, act=act)
    s, b, h = 4 * W, 3, layer.input_size
    g = torch.Generator().manual_seed(11)
    x_full = (torch.randn(s, b, h, generator=g) * 2 + offset).to(dtype)
    x_full[1] += 50.0  # one row far off its mean: LayerNorm must centre it
    n = layer.weight.shape[0] // (2 if act == "swiglu" else 1)  # output columns per rank
    grad_full = torch.randn(s, b, W * n, generator=g).to(dtype)
    rows = slice(rank * s // W, (rank + 1) * s // W) if sp else slice(None)
    x = x_full[rows].clone().requires_grad_()
    out, out_bias = layer(x)
    assert out_bias is None
    out.mul_(2.0)  # a caller may modify the output in place (Megatron's cross-entropy does): exact, undone below
    out = out / 2
    out.backward(grad_full[..., rank * n : (rank + 1) * n].contiguous())
    if sp:
        FP.allreduce_sequence_parallel_grads(layer)
    ref = _reference(x_full, layer, W, rank, norm, zero_centered, grad_full, act)
    what = (f"W={W} r={rank} {norm} sp={sp} deferred={deferred} {impl} {dtype} zc={zero_centered} offset={offset} "
            f"act={act}")
    got = dict(out=out, x=x.grad, w=layer.weight.grad, b=layer.bias.grad, gamma=layer.layer_norm_weight.grad,
               beta=None if layer.layer_norm_bias is None else layer.layer_norm_bias.grad)
    want = dict(ref, x=ref["x"][rows])  # without SP the input is replicated and its grad all-reduced
    for k, v in want.items():
        if v is None:
            continue
        err = _rel(got[k], v)
        if not err <= TOL[dtype]:
            failures.append(f"{what}: {k} relative error {err:.2e} > {TOL[dtype]:.0e}")


def _matrix(rank, W, cases):
    failures: list[str] = []
    for case in cases:
        _case(rank, W, *case[:7], failures, *case[7:])
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:30])


def _cases(W):
    out = []
    for norm, sp, deferred in itertools.product(("LayerNorm", "RMSNorm"), (True, False), (True, False)):
        if sp and W == 1:
            continue
        out.append((norm, sp, deferred, "fused" if sp else "sequential", torch.float32, norm == "RMSNorm", 0.0))
    out.append(("LayerNorm", W > 1, True, "sequential", torch.float32, False, 30.0))
    out.append(("LayerNorm", W > 1, True, "fused", torch.bfloat16, False, 30.0))
    out.append(("RMSNorm", W > 1, True, "sequential", torch.bfloat16, True, 0.0))
    # The activation in the same epilogue, and its recomputing backward:
    out.append(("LayerNorm", W > 1, True, "fused", torch.float32, False, 0.0, "swiglu"))
    out.append(("RMSNorm", W > 1, True, "sequential", torch.float32, True, 0.0, "gelu"))
    out.append(("LayerNorm", False, False, "sequential", torch.float32, False, 0.0, "silu"))
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_deferred_norm_layer_matches_unfused_float64(world_size):
    run_ranks(_matrix, world_size, _cases(world_size))


# ---- precision: why large-offset rows are centred -------------------------------------------------


def _deferred_error(offset: float, centre: bool) -> float:
    """bf16 relative error of the deferred LayerNorm GEMM on rows with mean ``offset`` (spread 1)."""
    from fluxlite.parallel.norm_linear import NormOptions, fold, row_stats

    g = torch.Generator().manual_seed(5)
    h, n = 512, 256
    x = (torch.randn(64, h, generator=g) + offset).bfloat16()
    w = (torch.randn(n, h, generator=g) / h**0.5).bfloat16()
    gamma = (1 + 0.1 * torch.randn(h, generator=g)).bfloat16()
    norm = NormOptions("LayerNorm", 1e-5, False, True)
    ref = F.layer_norm(x.double(), (h,), gamma.double(), None, 1e-5) @ w.double().t()
    w_fold, _ = fold(w, None, gamma, None, norm)
    mean, s = row_stats(x, norm)
    src = (x.float() - mean[:, None]).bfloat16() if centre else x
    out = ((src.float() @ w_fold.float().t()) * s[:, None]).bfloat16()
    return _rel(out, ref)


def test_large_mean_offsets_are_centred_and_stay_within_the_unfused_error():
    """Deferral's bf16 error grows with |mean|/sigma; centring (what the layer always does for
    LayerNorm) brings it back to the unfused path's level."""
    base = _deferred_error(0.0, centre=False)
    assert base < 1e-2
    far = _deferred_error(100.0, centre=False)
    assert far > 10 * base, (far, base)  # the loss is real: without centring the result is off
    assert _deferred_error(100.0, centre=True) < 2 * base


# ---- the fold follows gamma as it trains ----------------------------------------------------------


def _gamma_trains(rank, W):
    layer = _layer(W, "LayerNorm", True, True, "fused", torch.float32, False)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(2)
    for step in range(3):
        x = torch.randn(4, 2, layer.input_size, generator=g)
        out, _ = layer(x.requires_grad_())
        out.square().mean().backward()
        FP.allreduce_sequence_parallel_grads(layer)
        opt.step()
        opt.zero_grad()
    # after the updates the layer equals the unfused computation with its current parameters
    x = torch.randn(4, 2, layer.input_size, generator=g)
    out, _ = layer(x)
    gathered = [torch.empty_like(x) for _ in range(W)]
    torch.distributed.all_gather(gathered, x)
    y = F.layer_norm(torch.cat(gathered).double(), (layer.input_size,), layer.layer_norm_weight.double(),
                     layer.layer_norm_bias.double(), 1e-5)
    ref = y @ layer.weight.double().t() + layer.bias.double()
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rmsnorm_fold_in_the_weights_dtype_has_the_fp32_folds_bits(dtype):
    """RMSNorm's fold multiplies in the weight's dtype (no fp32 copy of the weight): every product of
    two 16-bit floats is exact in fp32, so rounding it once gives the fp32 fold's bits."""
    from fluxlite.parallel.norm_linear import NormOptions, fold

    g = torch.Generator().manual_seed(17)
    w = (torch.randn(96, 200, generator=g) * torch.logspace(-6, 3, 200)).to(dtype)  # many exponents
    gamma = (torch.randn(200, generator=g) * 3).to(dtype)
    bias = torch.randn(96, generator=g).to(dtype)
    norm = NormOptions("RMSNorm", 1e-6, False, True)
    w_fold, b_fold = fold(w, bias, gamma, None, norm)
    assert w_fold.dtype == dtype and torch.equal(w_fold, (w.float() * gamma.float()).to(dtype))
    assert torch.equal(b_fold, bias) and b_fold.data_ptr() != bias.data_ptr()


def test_fold_is_refreshed_when_parameters_change():
    run_ranks(_gamma_trains, 2)


# ---- constructor contract -------------------------------------------------------------------------


def _contract(rank, W):
    cfg = FP.ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float32, use_cpu_initialization=True)
    cfg.normalization, cfg.layernorm_epsilon, cfg.layernorm_zero_centered_gamma = "RMSNorm", 1e-6, True
    layer = LayerNormColumnParallelLinear(16, 8, config=cfg, init_method=torch.nn.init.normal_, bias=False,
                                          skip_bias_add=False, is_expert=False, tp_comm_buffer_name="qkv")
    assert (layer.norm.normalization, layer.norm.eps, layer.norm.zero_centered_gamma) == ("RMSNorm", 1e-6, True)
    names = {n for n, _ in layer.named_parameters()}
    assert names == {"weight", "layer_norm_weight"}, names
    assert layer.layer_norm_weight.sequence_parallel and layer.weight.partition_dim == 0
    with pytest.raises(ValueError, match="normalization must be one of"):
        LayerNormColumnParallelLinear(16, 8, config=cfg, init_method=torch.nn.init.normal_, normalization="BatchNorm")
    with pytest.raises(ValueError, match="gather_output"):
        LayerNormColumnParallelLinear(16, 8, config=cfg, init_method=torch.nn.init.normal_, gather_output=True)
    with pytest.raises(ValueError, match="expects input"):
        layer(torch.randn(2, 1, 15))


def test_constructor_contract():
    run_ranks(_contract, 2)
