"""The real client for the deferred norm: Megatron-core's GPTModel with fluxlite's
LayerNormColumnParallelLinear in ``linear_qkv`` and ``linear_fc1`` (as TransformerEngine's spec puts
``TELayerNormColumnParallelLinear`` there), ``IdentityOp`` input norms and Megatron's own Row layers,
against the local spec (norm modules plus Megatron's Column layers) on the same weights: loss and
every gradient, with the norm parameters mapped as Megatron maps TE checkpoints
(``input_layernorm.`` -> ``self_attention.linear_qkv.layer_norm_``, ``pre_mlp_layernorm.`` ->
``mlp.linear_fc1.layer_norm_``).

CPU stand-ins as in tests/test_parallel_megatron.py. Needs megatron-core; skipped without it.
"""

from __future__ import annotations

import pytest
import torch

from tests.dist_utils import run_ranks
from tests.test_parallel_megatron import TINY, _rel, _submodules, make_batch, megatron_parallel_state

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

NORM_KEYS = {"input_layernorm.": "self_attention.linear_qkv.layer_norm_",
             "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_"}


def _to_fluxlite_name(name: str) -> str:
    for old, new in NORM_KEYS.items():
        if f".{old}" in name:
            return name.replace(old, new)
    return name


def _norm_class(normalization: str):
    base = torch.nn.LayerNorm if normalization == "LayerNorm" else torch.nn.RMSNorm

    class SPNorm(base):
        """Megatron's norm contract (config, hidden_size, eps) with sequence-parallel grads marked."""

        def __init__(self, config, hidden_size, eps=1e-5, **_):
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
            for p in self.parameters():
                p.sequence_parallel = config.sequence_parallel

    return SPNorm


def _build(W, *, deferred: bool, sp: bool, glu: bool, normalization: str, dtype, overlap: str, device):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    from fluxlite.parallel import LayerNormColumnParallelLinear

    cfg = TransformerConfig(
        num_layers=TINY["layers"], hidden_size=TINY["hidden"], num_attention_heads=TINY["heads"],
        ffn_hidden_size=TINY["ffn"], tensor_model_parallel_size=W, sequence_parallel=sp,
        use_cpu_initialization=True, params_dtype=dtype, bf16=dtype == torch.bfloat16, hidden_dropout=0.0,
        attention_dropout=0.0, add_bias_linear=not glu, gated_linear_unit=glu, normalization=normalization,
        layernorm_epsilon=1e-5, activation_func=torch.nn.functional.silu if glu else torch.nn.functional.gelu,
    )
    norm = _norm_class(normalization)
    spec = get_gpt_layer_local_spec()
    sm = spec.submodules
    sm.input_layernorm = sm.pre_mlp_layernorm = norm
    if deferred:
        layer = ModuleSpec(module=LayerNormColumnParallelLinear, params={"overlap": overlap})
        sm.input_layernorm = sm.pre_mlp_layernorm = IdentityOp
        sm.self_attention.submodules.linear_qkv = layer
        _submodules(sm.mlp).linear_fc1 = layer
    block = TransformerBlockSubmodules(layer_specs=[spec] * cfg.num_layers, layer_norm=norm)
    torch.manual_seed(1234)
    model = GPTModel(config=cfg, transformer_layer_spec=block, vocab_size=TINY["vocab"],
                     max_sequence_length=TINY["seq"])
    return model.to(device=device, dtype=dtype)


def _case(rank, W, normalization, sp, glu, dtype, overlap, tol, device):
    import fluxlite.parallel as FP

    what = dict(norm=normalization, sp=sp, glu=glu, dtype=dtype, overlap=overlap)
    ref = _build(W, deferred=False, sp=sp, glu=glu, normalization=normalization, dtype=dtype, overlap=overlap,
                 device=device)
    flx = _build(W, deferred=True, sp=sp, glu=glu, normalization=normalization, dtype=dtype, overlap=overlap,
                 device=device)
    assert isinstance(flx.decoder.layers[0].self_attention.linear_qkv, FP.LayerNormColumnParallelLinear)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # non-trivial norm parameters
        for name, p in ref.named_parameters():
            if "layernorm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g).to(p.device, p.dtype))
    state = {_to_fluxlite_name(k): v for k, v in ref.state_dict().items()}
    missing, unexpected = flx.load_state_dict(state, strict=False)
    assert not unexpected and not [k for k in missing if not k.endswith("_extra_state")], (missing, unexpected)
    flx_params = dict(flx.named_parameters())
    for name, p in ref.named_parameters():
        q = flx_params[_to_fluxlite_name(name)]
        assert torch.equal(p, q), name
        assert getattr(p, "sequence_parallel", False) == getattr(q, "sequence_parallel", False), f"{name} ({what})"

    batch = make_batch(99, device)
    losses = []
    for model in (ref, flx):
        loss = model(**batch).float().mean()
        loss.backward()
        FP.allreduce_sequence_parallel_grads(model)
        losses.append(loss.detach())
    assert _rel(losses[1], losses[0]) <= tol, f"loss {losses[1].item()} vs {losses[0].item()} ({what})"
    for name, p in ref.named_parameters():
        q = flx_params[_to_fluxlite_name(name)]
        assert q.grad is not None, f"{name} has no grad ({what})"
        err = _rel(q.grad, p.grad)
        assert err <= tol, f"grad of {name}: relative error {err:.2e} > {tol:.0e} ({what})"


def _worker(rank, W, on_gpu, cases):
    with megatron_parallel_state(W, on_gpu) as device:
        for case in cases:
            _case(rank, W, *case, device)


CPU_CASES = [  # (normalization, sequence parallel, gated linear unit, dtype, overlap, tolerance)
    ("LayerNorm", True, False, torch.float32, "fused", 1e-5),
    ("RMSNorm", True, True, torch.float32, "fused", 1e-5),
    ("LayerNorm", False, False, torch.float32, "sequential", 1e-5),
    ("RMSNorm", True, False, torch.bfloat16, "sequential", 3e-2),
]


def test_gpt_model_with_deferred_norm_layers_matches_megatron_cpu():
    run_ranks(_worker, 2, False, CPU_CASES, timeout_s=60)


GPU_CASES = [
    ("LayerNorm", True, False, torch.bfloat16, "fused", 3e-2),
    ("RMSNorm", True, True, torch.bfloat16, "fused", 3e-2),
    ("RMSNorm", True, True, torch.float32, "sequential", 1e-4),
]


@pytest.mark.gpu
def test_gpt_model_with_deferred_norm_layers_matches_megatron_gpu():
    from tests.gpu_utils import run_gpu_ranks

    run_gpu_ranks(_worker, 2, True, GPU_CASES)
