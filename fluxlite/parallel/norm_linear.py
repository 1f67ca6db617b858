"""``LayerNormColumnParallelLinear``: a LayerNorm/RMSNorm followed by a column-parallel linear layer,
with the norm *deferred* past the GEMM (arXiv 2502.17728) and the GEMM's all-gather overlapped
(fluxlite's fused AG-GEMM). A drop-in for Megatron's ``TELayerNormColumnParallelLinear`` in
``linear_qkv`` / ``linear_fc1``, without TransformerEngine.

Math (``x: [m, h]`` this rank's rows, ``γ, β: [h]``, ``W: [N/W, h]``, ``b: [N/W]``)::

    RMSNorm:   y = (x ⊙ s) γ Wᵀ + b                      s = 1/sqrt(mean(x²) + eps)  (per row)
             = s · (x · W′ᵀ) + b                          W′ = W ⊙ γ
    LayerNorm: y = ((x − μ) ⊙ s) γ Wᵀ + β Wᵀ + b          s = 1/sqrt(var(x) + eps)
             = s · (x · W′ᵀ) + b′                         W′ = W ⊙ γ − rowmean(W ⊙ γ),  b′ = W β + b

``rowmean`` is the mean over ``h`` of each row of ``W ⊙ γ``, so ``x · W′ᵀ = (x − μ) · (W ⊙ γ)ᵀ``: the
centring folds into the weight. The GEMM therefore runs on the rows as they are (LayerNorm centres
them first, see Precision): each rank sends its raw
rows and its ``[m]`` row scales ``s`` (4 bytes a row) through the all-gather, and the epilogue
applies ``s`` then ``b′`` (:mod:`fluxlite.epilogue`). No normalised activation is ever written,
gathered or read. ``W′`` and ``b′`` are folded in fp32 and cast to the weight's dtype; they are
recomputed whenever ``W``, ``γ``, ``β`` or ``b`` change (parameter versions), so ``γ`` trains.

Precision: exact in real arithmetic, not bitwise. In bf16 the folded weight is rounded, so
``Σ_h W′`` is no longer exactly 0 and a row's mean ``μ`` leaks into the output with a relative
error of about ``|μ|·s`` times bf16's rounding (tests/test_norm_linear.py: 1.8e-1 at ``|μ|·s = 100``;
1.24 on one H200 with unit-variance weights). That cannot be detected per call without a host
synchronisation (a check that lags a step behind lets one wrong step through), so LayerNorm rows are
always centred (``x − μ``, one elementwise pass) before they are sent: the error is then the
unfused path's at any offset. The folded weight and the collective are unchanged by it. RMSNorm has
no such term and sends its rows as they are.

Backward: the normalised input ``n = norm(x)`` is recomputed from the saved raw rows and stats; the
Column layer's backward runs on it (:func:`fluxlite.library.linear_backward`: under sequence
parallelism ``n`` gathered again for ``dW = gᵀ · n`` beside the dgrad ``dn = reduce_scatter(g · W)``,
by the copy engines where that GEMM-RS runs fused); then the norm's own backward gives ``dx``,
``dγ``, ``dβ``. Under sequence parallelism ``dγ``/``dβ`` are partial
sums over this rank's rows and the parameters are marked ``sequence_parallel`` (Megatron's
``finalize_model_grads``, or :func:`fluxlite.parallel.allreduce_sequence_parallel_grads`, reduces them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn import Parameter

from .. import epilogue, ops
from .._sequential import epilogue_linear
from ..library import Regather, linear_backward
from .functions import (
    LinearOptions,
    _column_out,
    _forward_main_grad,
    _rows,
    _start_column_dgrad,
    _weight_grad_to,
)
from .layers import _ParallelLinear
from .utils import divide, param_device, set_tensor_model_parallel_attributes

NORMALIZATIONS = ("LayerNorm", "RMSNorm")
@dataclass(frozen=True)
class NormOptions:
    """The norm of a :class:`LayerNormColumnParallelLinear`: which, its eps, whether ``γ`` is stored
    zero-centred (``γ_eff = 1 + γ``), and whether it is deferred past the GEMM."""

    normalization: str
    eps: float
    zero_centered_gamma: bool
    deferred: bool

    @property
    def centred(self) -> bool:
        return self.normalization == "LayerNorm"


def row_stats(x: torch.Tensor, norm: NormOptions) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(μ or None, s)`` of ``x: [m, h]`` in fp32: the row means (LayerNorm) and ``1/σ`` (or ``1/rms``)."""
    x32 = x.float()
    if norm.centred:
        var, mean = torch.var_mean(x32, dim=-1, correction=0)
        return mean, torch.rsqrt(var + norm.eps)
    return None, torch.rsqrt(x32.square().mean(-1) + norm.eps)


def normalize(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, norm: NormOptions) -> torch.Tensor:
    """The norm itself, differentiably, in fp32: ``[m, h]`` -> ``[m, h]`` fp32."""
    g = gamma.float() + 1.0 if norm.zero_centered_gamma else gamma.float()
    if norm.centred:
        return F.layer_norm(x.float(), x.shape[-1:], g, None if beta is None else beta.float(), norm.eps)
    return F.rms_norm(x.float(), x.shape[-1:], g, norm.eps)


def fold(weight: torch.Tensor, bias: torch.Tensor | None, gamma: torch.Tensor, beta: torch.Tensor | None,
         norm: NormOptions) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(W′, b′)`` of the module docstring, folded in fp32, in the weight's dtype.

    RMSNorm with ``γ`` stored as is and in the weight's dtype multiplies in that dtype: each product
    is computed in fp32 and rounded once, the same bits as the fp32 fold and cast, without the fp32
    copy of ``W`` (some 940 MB for a Llama-70B fc1 shard at TP=2), which a training step refolds."""
    if not norm.centred and not norm.zero_centered_gamma and gamma.dtype == weight.dtype:
        w = weight * gamma
        return w.contiguous(), None if bias is None else bias.to(weight.dtype, copy=True)
    w = weight.float() * (gamma.float() + 1.0 if norm.zero_centered_gamma else gamma.float())
    if norm.centred:
        w = w - w.mean(dim=1, keepdim=True)
    b = None if bias is None else bias.float()
    if norm.centred and beta is not None:
        wb = weight.float() @ beta.float()
        b = wb if b is None else b + wb
    return w.to(weight.dtype).contiguous(), None if b is None else b.to(weight.dtype)


class LayerNormLinearFunction(torch.autograd.Function):
    """``linear(norm(x))`` with the norm deferred into the GEMM (see the module docstring).

    Inputs are ordered as :class:`~fluxlite.parallel.functions.ColumnParallelLinearFunction`'s
    (``x, weight, bias``), then ``γ, β`` (``β`` ``None`` for RMSNorm), the options, the folded
    ``(W′, b′)`` the module keeps (``None`` when the norm is not deferred), the rows' ``(μ, s)``
    (:func:`row_stats`)."""

    @staticmethod
    def forward(ctx, x, weight, bias, gamma, beta, options: LinearOptions, norm: NormOptions, folded, stats):
        x2 = _rows(x).detach()
        mean, s = stats
        tp = options.tp
        act = options.activation
        if norm.deferred:
            w_fold, b_fold = folded
            src = (x2.float() - mean[:, None]).to(x2.dtype) if norm.centred else x2
            scales = s
        else:  # the unfused path, for comparison and as a fallback: norm, then the GEMM
            w_fold, b_fold = weight.detach(), None if bias is None else bias.detach()
            src, scales = normalize(x2, gamma, beta, norm).to(x2.dtype), None
        if options.sp:
            out = ops.ag_gemm(src, w_fold, b_fold, group=tp.group, impl=options.impl, row_scale=scales,
                              activation=act)
        else:
            out = epilogue_linear(None, src, w_fold, b_fold, epilogue.Epilogue(act, scales is not None), scales)
        ctx.options, ctx.norm, ctx.main_grad = options, norm, _forward_main_grad(weight, options)
        ctx.has_bias, ctx.in_shape = bias is not None, x.shape
        ctx.save_for_backward(x2, weight, gamma, beta, bias if act is not None else None)
        return out  # the rows: the module views them (a view made here could not be modified in place)

    @staticmethod
    @once_differentiable  # it recomputes the norm's grads from detached tensors: no graph to differentiate again
    def backward(ctx, grad_out):
        x2, weight, gamma, beta, bias = ctx.saved_tensors
        opt, norm = ctx.options, ctx.norm
        weight_grad = _weight_grad_to(ctx, weight)  # before any communication: it may raise
        g = _rows(grad_out).contiguous()
        with torch.enable_grad():
            xr = x2.detach().requires_grad_(ctx.needs_input_grad[0])
            gr = gamma.detach().requires_grad_(ctx.needs_input_grad[3])
            br = None if beta is None else beta.detach().requires_grad_(ctx.needs_input_grad[4])
            n32 = normalize(xr, gr, br, norm)
        n = n32.detach().to(x2.dtype)
        need_norm_grads = any(ctx.needs_input_grad[i] for i in (0, 3, 4))
        # The Column layer's backward on n (its activation's grad recomputed from the gathered n)
        dn, grad_w, grad_b = linear_backward(
            g, weight, n,
            regather=Regather(opt.tp, opt.impl) if opt.sp else None,
            start_dgrad=(lambda g: _start_column_dgrad(g, weight, opt))
            if need_norm_grads else None,
            weight_grad=weight_grad, bias_grad=ctx.has_bias and ctx.needs_input_grad[2], activation=opt.activation,
            bias=bias)
        grad_x = grad_gamma = grad_beta = None
        if dn is not None:
            inputs = [t for t in (xr, gr, br) if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(n32, inputs, dn.float()))
            grad_x = next(grads).to(x2.dtype) if xr.requires_grad else None
            grad_gamma = next(grads).to(gamma.dtype) if gr.requires_grad else None
            grad_beta = next(grads).to(beta.dtype) if br is not None and br.requires_grad else None
            if grad_x is not None:
                grad_x = grad_x.view(ctx.in_shape)
        return grad_x, grad_w, grad_b, grad_gamma, grad_beta, None, None, None, None


class LayerNormColumnParallelLinear(_ParallelLinear):
    """A norm (``"LayerNorm"`` or ``"RMSNorm"``) then ``Y = X A + b`` with ``A`` split along its output
    dim: Megatron's ``TELayerNormColumnParallelLinear`` contract (constructor keywords, parameter
    names ``layer_norm_weight``, ``layer_norm_bias``, ``weight``, ``bias``, ``(output, output_bias)``).

    Input ``[s, b, h]``, or ``[s/tp, b, h]`` under sequence parallelism; output ``[s, b, out/tp]``.
    The norm comes from ``config.normalization``, ``config.layernorm_epsilon`` and
    ``config.layernorm_zero_centered_gamma``, each overridable by keyword. ``deferred=False`` runs the
    norm first and then the GEMM (the same collective; for comparison). ``overlap`` is fluxlite's
    ``impl`` of the all-gather GEMM, as in :class:`ColumnParallelLinear`; ``activation`` (fluxlite's,
    not TE's) as in :class:`ColumnParallelLinear`: fused into the same epilogue as the row scale, so
    norm, GEMM and activation take one kernel.
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config,
        init_method: Callable,
        gather_output: bool = False,
        bias: bool = True,
        skip_bias_add: bool = False,
        is_expert: bool = False,
        skip_weight_param_allocation: bool = False,
        tp_comm_buffer_name: Optional[str] = None,
        tp_group=None,
        stride: int = 1,
        normalization: Optional[str] = None,
        eps: Optional[float] = None,
        zero_centered_gamma: Optional[bool] = None,
        deferred: bool = True,
        overlap: str = "auto",
        activation: Optional[str] = None,
        **kwargs,
    ):
        super().__init__()
        if gather_output:
            raise ValueError("LayerNormColumnParallelLinear does not support gather_output=True (as TE's)")
        if skip_weight_param_allocation:
            raise ValueError("LayerNormColumnParallelLinear does not support skip_weight_param_allocation=True (as TE's)")
        self._setup(input_size, output_size, skip_bias_add, config, tp_group, overlap, is_expert,
                    dict(kwargs, tp_comm_buffer_name=tp_comm_buffer_name))
        normalization = normalization or getattr(config, "normalization", "LayerNorm")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        eps = getattr(config, "layernorm_epsilon", 1e-5) if eps is None else eps
        if zero_centered_gamma is None:
            zero_centered_gamma = bool(getattr(config, "layernorm_zero_centered_gamma", False))
        self.norm = NormOptions(normalization, float(eps), bool(zero_centered_gamma), bool(deferred))
        W = self._tp.world_size
        self.output_size_per_partition = divide(output_size, W, "output_size")
        self._set_activation(activation)
        self.allreduce_dgrad = W > 1 and not self.sequence_parallel
        self.weight = self._make_weight((self.output_size_per_partition, input_size), 0, init_method, stride, False)
        device = param_device(config, self._tp)
        gamma_init = torch.zeros if zero_centered_gamma else torch.ones
        self.layer_norm_weight = Parameter(gamma_init(input_size, dtype=config.params_dtype, device=device))
        if self.norm.centred:
            self.layer_norm_bias = Parameter(torch.zeros(input_size, dtype=config.params_dtype, device=device))
        else:
            self.register_parameter("layer_norm_bias", None)
        for p in (self.layer_norm_weight, self.layer_norm_bias):
            if p is not None:
                p.sequence_parallel = self.sequence_parallel
        if bias:
            self.bias = self._make_bias(self.output_size_per_partition)
            set_tensor_model_parallel_attributes(self.bias, True, 0, stride)
        else:
            self.register_parameter("bias", None)
        self._folded: tuple[tuple, tuple] | None = None

    def _fold(self, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(W′, b′)``, refolded only when a parameter changed (in-place updates bump versions)."""
        params = (self.weight, bias, self.layer_norm_weight, self.layer_norm_bias)
        key = tuple((p.data_ptr(), p._version) if p is not None else None for p in params)
        if self._folded is None or self._folded[0] != key:
            with torch.no_grad():
                self._folded = (key, fold(self.weight, bias, self.layer_norm_weight, self.layer_norm_bias, self.norm))
        return self._folded[1]

    def forward(self, input_: torch.Tensor):
        self._check_input(input_, self.input_size, self.weight)
        bias = self.bias if not self.skip_bias_add else None
        folded = self._fold(bias) if self.norm.deferred else None
        stats = (None, None)  # the unfused path normalises inside the function
        if self.norm.deferred:
            with torch.no_grad():
                stats = row_stats(_rows(input_.detach()), self.norm)
        options = self._options(allreduce_dgrad=self.allreduce_dgrad, activation=self.activation)
        rows = LayerNormLinearFunction.apply(input_, self.weight, bias, self.layer_norm_weight, self.layer_norm_bias,
                                             options, self.norm, folded, stats)
        return _column_out(rows, input_, options), (self.bias if self.skip_bias_add else None)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        """Megatron distributed checkpointing: weight and bias sharded along dim 0, the norm replicated."""
        return self._sharded(prefix, sharded_offsets, metadata, {"weight": 0, "bias": 0})

    def extra_repr(self) -> str:
        return super().extra_repr() + f", normalization={self.norm.normalization}, deferred={self.norm.deferred}"
