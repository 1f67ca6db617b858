"""fluxlite.parallel on CPU ranks (gloo): every layer configuration against a single-process
``nn.Linear`` reference in float64, the mappings, and the layer API (attributes, state_dict, errors).

Each spawn runs many cases (a spawn costs about 2 s for 2 ranks, 4 s for 4). The data is fresh on
every run: the seed is drawn here and printed on failure, so a failure can be replayed with
``FLUXLITE_TEST_SEED=<seed>``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import warnings

import pytest
import torch

from tests.dist_utils import run_ranks

# Set in the environment so that the spawned ranks (which import this module again) report the same seed.
os.environ.setdefault("FLUXLITE_TEST_SEED", str(random.randrange(2**31)))
SEED = int(os.environ["FLUXLITE_TEST_SEED"])
TOL = dict(rtol=1e-10, atol=1e-10)  # float64 through torch.matmul and gloo: only summation order differs
# The fused GEMM-RS sums the ranks' partials in fp32 (accumulation is fp32), even for float64.
TOL_FUSED = dict(rtol=1e-5, atol=1e-5)


def _seed_msg():
    return f"(replay with FLUXLITE_TEST_SEED={SEED})"


# ---- reference helpers (run inside the ranks) ----------------------------------------------------

def _init(seed):
    def init_method(w):
        # any deterministic draw from the global CPU RNG: every rank is seeded alike
        return torch.nn.init.normal_(w, std=0.5)

    torch.manual_seed(seed)
    return init_method


def _reference(X, master, bias_full, G, add_bias: bool):
    """Single-process nn.Linear: output, and grads of (Y * G).sum() w.r.t. input, weight, bias."""
    lin = torch.nn.Linear(master.shape[1], master.shape[0], bias=bias_full is not None, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(master)
        if bias_full is not None:
            lin.bias.copy_(bias_full)
    Xr = X.clone().requires_grad_()
    Y = Xr @ lin.weight.t() + (lin.bias if (bias_full is not None and add_bias) else 0)
    (Y * G).sum().backward()
    bgrad = None
    if bias_full is not None:
        bgrad = G.reshape(-1, G.shape[-1]).sum(0)  # d/db of (Y + b) * G, whether added here or by the caller
    return Y.detach(), Xr.grad, lin.weight.grad, bgrad


def _close(actual, expected, what, case):
    """float64 cases: elementwise, tight. Low-precision (GPU) cases: relative error of the norm."""
    actual = actual.detach().cpu().double()
    if case.get("dtype", torch.float64) == torch.float64:
        tol = TOL_FUSED if "fused" in (case.get("overlap"), case.get("dgrad")) else TOL
        torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what} of {case} {_seed_msg()}: {m}")
        return
    assert actual.shape == expected.shape, f"{what} of {case}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).norm().item() / max(expected.norm().item(), 1e-30)
    assert err <= case["tol"], f"{what} of {case} {_seed_msg()}: relative error {err:.3e} > {case['tol']:.1e}"


def _modified_in_place(out: torch.Tensor) -> torch.Tensor:
    """``out`` doubled in place and halved again (exact in any float dtype), as a caller may modify a
    layer's output in place (Megatron's vocab-parallel cross-entropy shifts its logits): autograd
    refuses that on a view made inside a custom Function, and the grads must flow through it."""
    out.mul_(2.0)
    return out / 2


def _data(seed, dtype, *shapes):
    """float64 tensors exactly representable in ``dtype`` (so the reference sees what the layer sees)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*sh, dtype=torch.float64, generator=g).to(dtype).double() for sh in shapes]


# ---- the layer matrix ----------------------------------------------------------------------------
# A case runs on ``device`` in ``dtype`` (CPU: float64; GPU: bfloat16 with tolerance ``tol``), and
# compares with the float64 reference computed on the CPU from the same (rounded) values.

SMALL = dict(s=8, b=3, K=8, N=16)


def _column_case(rank, W, seed, sp, bias, skip, gather, overlap, stride=1, dims=3, *, dtype=torch.float64,
                 device="cpu", tol=None, size=SMALL, dgrad=None):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, partition_index

    case = dict(layer="Column", W=W, sp=sp, bias=bias, skip_bias_add=skip, gather_output=gather,
                overlap=overlap, stride=stride, dims=dims, dtype=dtype, tol=tol,
                dgrad=dgrad)  # dgrad: the impl its GEMM-RS runs, if known
    s, b, K, N = size["s"], size["b"], size["K"], size["N"]
    init = _init(seed)
    cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=dtype, use_cpu_initialization=device == "cpu")
    layer = ColumnParallelLinear(K, N, config=cfg, init_method=init, bias=bias, gather_output=gather,
                                 skip_bias_add=skip, stride=stride, keep_master_weight_for_test=True,
                                 overlap=overlap)
    assert layer.weight.device.type == device, (layer.weight.device, case)
    X, G, bias_full = _data(seed + 1, dtype, (s, b, K), (s, b, N), (N,))
    bias_full = bias_full if bias else None
    idx = partition_index(N, W, rank, stride)
    if bias:
        with torch.no_grad():
            layer.bias.copy_(bias_full[idx])
    if dims == 2:  # rows [s*b, K]: the same thing seen as 2-D
        X, G = X.reshape(s * b, K), G.reshape(s * b, N)
    rows = slice(rank * X.shape[0] // W, (rank + 1) * X.shape[0] // W)
    x = (X[rows] if sp else X).to(device, dtype, copy=True).requires_grad_()
    out, out_bias = layer(x)
    out = _modified_in_place(out)
    master = layer.master_weight.detach().cpu().double()
    Y, dX, dWt, db = _reference(X, master, bias_full, G, add_bias=not (skip and gather))
    if skip:
        assert out_bias is layer.bias, case
        if bias and not gather:
            out = out + out_bias  # what the caller does with a skipped bias
    else:
        assert out_bias is None, case
    if gather:
        order = torch.cat([partition_index(N, W, p, stride) for p in range(W)])
        _close(out, Y[..., order], "output", case)
        upstream = G[..., order]  # replicated on every rank, like a loss after the gather
    else:
        _close(out, Y[..., idx], "output", case)
        upstream = G[..., idx]  # this rank's share of (Y * G).sum()
    out.backward(upstream.to(device, dtype))
    _close(x.grad, dX[rows] if sp else dX, "input grad", case)
    _close(layer.weight.grad, dWt[idx], "weight grad", case)
    if bias and not (skip and gather):
        _close(layer.bias.grad, db[idx], "bias grad", case)
    elif bias:
        assert layer.bias.grad is None, case


def _row_case(rank, W, seed, sp, bias, skip, input_is_parallel, overlap, stride=1, dims=3, *, dtype=torch.float64,
              device="cpu", tol=None, size=SMALL):
    from fluxlite.parallel import ModelParallelConfig, RowParallelLinear, allreduce_sequence_parallel_grads, partition_index

    case = dict(layer="Row", W=W, sp=sp, bias=bias, skip_bias_add=skip, input_is_parallel=input_is_parallel,
                overlap=overlap, stride=stride, dims=dims, dtype=dtype, tol=tol)
    s, b, K, N = size["s"], size["b"], size["N"], size["K"]  # Row maps N -> K: the Column's shapes reversed
    init = _init(seed)
    cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=dtype, use_cpu_initialization=device == "cpu")
    kw = dict(config=cfg, init_method=init, bias=bias, input_is_parallel=input_is_parallel, skip_bias_add=skip,
              stride=stride, keep_master_weight_for_test=True, overlap=overlap)
    if sp and not input_is_parallel:
        with pytest.raises(RuntimeError, match="input_is_parallel"):
            RowParallelLinear(K, N, **kw)
        return
    layer = RowParallelLinear(K, N, **kw)
    X, G, bias_full = _data(seed + 1, dtype, (s, b, K), (s, b, N), (N,))
    bias_full = bias_full if bias else None
    if bias:
        with torch.no_grad():
            layer.bias.copy_(bias_full)
        assert layer.bias.sequence_parallel == sp and not getattr(layer.bias, "tensor_model_parallel", False)
    if dims == 2:
        X, G = X.reshape(s * b, K), G.reshape(s * b, N)
    idx = partition_index(K, W, rank, stride)
    rows = slice(rank * X.shape[0] // W, (rank + 1) * X.shape[0] // W)
    x = (X[..., idx] if input_is_parallel else X).to(device, dtype, copy=True).requires_grad_()
    out, out_bias = layer(x)
    out = _modified_in_place(out)
    master = layer.master_weight.detach().cpu().double()
    Y, dX, dWt, db = _reference(X, master, bias_full, G, add_bias=True)
    if skip:
        assert out_bias is layer.bias, case
        if bias:
            out = out + out_bias
    else:
        assert out_bias is None, case
    _close(out, Y[rows] if sp else Y, "output", case)
    out.backward((G[rows] if sp else G).to(device, dtype))
    _close(x.grad, dX[..., idx] if input_is_parallel else dX, "input grad", case)
    _close(layer.weight.grad, dWt[:, idx], "weight grad", case)
    if bias:
        if sp:  # a partial sum over this rank's rows until the TP all-reduce Megatron's optimizer does
            _close(layer.bias.grad, G[rows].reshape(-1, N).sum(0), "partial SP bias grad", case)
            assert allreduce_sequence_parallel_grads(layer) == 1
        _close(layer.bias.grad, db, "bias grad", case)


def _matrix(rank, W, seed, overlaps, **where):
    """Every sequence_parallel x bias x skip_bias_add x gather_output/input_is_parallel combination,
    each sequence-parallel one under every ``overlap`` (the Column layer re-gathers its input for
    wgrad); then strided partitions and 2-D inputs."""
    n = 0
    for sp, bias, skip, gather in itertools.product((False, True), repeat=4):
        for overlap in overlaps if sp else ("auto",):
            _column_case(rank, W, seed + n, sp, bias, skip, gather, overlap, **where)
            _row_case(rank, W, seed + n + 1, sp, bias, skip, gather, overlap, **where)
            n += 2
    for sp, dims in ((False, 2), (True, 2), (True, 3)):  # Megatron's GLU fc1 uses stride 2
        _column_case(rank, W, seed + n, sp, True, False, False, overlaps[0], stride=2, dims=dims, **where)
        _row_case(rank, W, seed + n + 1, sp, True, False, True, overlaps[0], stride=2, dims=dims, **where)
        n += 2


@contextlib.contextmanager
def _gathers_counted():
    """The input shapes of every ``AG.gather`` (AG-GEMM's transport alone) made in the block; the
    gathers still run."""
    from fluxlite.ops import AG

    gathers, real = [], AG.gather
    AG.gather = lambda a, tp, timeout_s, arrived=None: gathers.append(a.shape) or real(a, tp, timeout_s, arrived)
    try:
        yield gathers
    finally:
        del AG.gather  # the instance attribute: the method shows through again


def _dgrad_follows_dispatch(rank, W, seed):
    """``overlap="auto"``: the sequence-parallel Column dgrad runs what the GEMM-RS op chooses
    (:mod:`fluxlite.dispatch`), not a rule of its own. With the op's choice for the dgrad's key set to
    each impl, a fused or decomposed GEMM-RS runs; with sequential none runs (the matmul runs in the
    layer, its reduce-scatter in flight while wgrad computes). The grads match float64 each time."""
    from fluxlite import dispatch
    from fluxlite.group import resolve_group
    from fluxlite.ops import RS

    s, b, K, N = SMALL["s"], SMALL["b"], SMALL["K"], SMALL["N"]
    g, weight_t = torch.empty(s * b, N // W, dtype=torch.float64), torch.empty(K, N // W, dtype=torch.float64)
    key = dispatch.Key.of("gemm_rs", resolve_group(), g, weight_t, g.shape[0])  # the dgrad's GEMM-RS
    ran, real = [], RS.run
    RS.run = lambda choice, args, **kw: ran.append(choice.impl) or real(choice, args, **kw)  # on the op object
    try:
        with _gathers_counted() as gathers:
            for n, impl in enumerate(("fused", "decomposed", "sequential")):
                dispatch._MEMORY[key] = dispatch.Choice(impl, source="measured")
                ran.clear()
                gathers.clear()
                _column_case(rank, W, seed + n, True, True, False, False, "auto", dgrad=impl)
                assert ran == ([] if impl == "sequential" else [impl]), (impl, ran)
                # the input for wgrad: by the copy engines beside a fused dgrad, else NCCL's (gloo's here)
                assert len(gathers) == (impl == "fused"), (impl, gathers)
    finally:
        del RS.run
        dispatch.clear_memory()


def _main_grad_regathers_in_parts(rank, W, seed):
    """Sequence parallel, ``overlap="fused"``: the Column backward gathers its input by AG-GEMM's
    transport (``AG.gather``), its weight grad in parts, whether the grad is returned or accumulates
    into ``main_grad`` (``gradient_accumulation_fusion``: each part added to the buffer). The weight
    grad matches float64 either way."""
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, partition_index

    s, b, K, N = SMALL["s"], SMALL["b"], SMALL["K"], SMALL["N"]
    with _gathers_counted() as gathers:
        for n, fusion in enumerate((False, True)):
            cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float64, use_cpu_initialization=True,
                                      gradient_accumulation_fusion=fusion)
            layer = ColumnParallelLinear(K, N, config=cfg, init_method=_init(seed + n), bias=False,
                                         gather_output=False, keep_master_weight_for_test=True, overlap="fused")
            if fusion:
                layer.weight.main_grad = torch.full_like(layer.weight, 0.5)
            X, G = _data(seed + n + 1, torch.float64, (s, b, K), (s, b, N))
            rows = slice(rank * s // W, (rank + 1) * s // W)
            gathers.clear()
            out, _ = layer(X[rows].clone().requires_grad_())
            idx = partition_index(N, W, rank, 1)
            out.backward(G[..., idx])
            want = G[..., idx].reshape(-1, N // W).t() @ X.reshape(-1, K)
            case = dict(layer="Column", W=W, gradient_accumulation_fusion=fusion)
            _close(layer.weight.main_grad - 0.5 if fusion else layer.weight.grad, want, "weight grad", case)
            assert len(gathers) == 1, (case, gathers)


def _column_dgrad_all_reduce_follows_dispatch(rank, W, seed):
    """Column without sequence parallelism: the dgrad is one ``gemm_ar`` wherever the layer's
    ``overlap`` runs the GEMM-AllReduce op fused or decomposed (named, or ``auto``'s choice for the
    dgrad's key, set here to each impl), whether a weight grad follows or the weight is frozen;
    where it runs sequential, no GEMM-AllReduce runs (the matmul runs in the layer, its all-reduce
    in flight while wgrad computes). The input and weight grads match float64 each time."""
    from fluxlite import dispatch
    from fluxlite.group import resolve_group
    from fluxlite.ops import AR
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, partition_index

    s, b, K, N = SMALL["s"], SMALL["b"], SMALL["K"], SMALL["N"]
    g, weight_t = torch.empty(s * b, N // W, dtype=torch.float64), torch.empty(K, N // W, dtype=torch.float64)
    key = dispatch.Key.of("gemm_ar", resolve_group(), g, weight_t, g.shape[0])  # the dgrad's GEMM-AllReduce
    cases = [(overlap, overlap) for overlap in ("sequential", "fused")]
    cases += [("auto", impl) for impl in ("fused", "decomposed", "sequential")]
    ran, real = [], AR.run
    AR.run = lambda choice, args, **kw: ran.append(choice.impl) or real(choice, args, **kw)
    try:
        for n, ((overlap, impl), frozen) in enumerate(itertools.product(cases, (False, True))):
            case = dict(layer="Column", W=W, sp=False, overlap=overlap, dgrad=impl, frozen=frozen)
            dispatch._MEMORY[key] = dispatch.Choice(impl, source="measured")
            AR.repeats.clear()  # a repeated call would skip AR.run (its decisions are kept); count every case
            cfg = ModelParallelConfig(sequence_parallel=False, params_dtype=torch.float64, use_cpu_initialization=True)
            layer = ColumnParallelLinear(K, N, config=cfg, init_method=_init(seed + n), bias=True, gather_output=False,
                                         keep_master_weight_for_test=True, overlap=overlap)
            layer.weight.requires_grad_(not frozen)
            X, G = _data(seed + n + 1, torch.float64, (s, b, K), (s, b, N))
            x = X.clone().requires_grad_()
            ran.clear()
            out, _ = layer(x)
            g_local = G[..., partition_index(N, W, rank, 1)]
            out.backward(g_local)
            master = layer.master_weight.detach().double()
            _close(x.grad, G @ master, "input grad", case)
            if not frozen:
                _close(layer.weight.grad, g_local.reshape(-1, N // W).t() @ X.reshape(-1, K), "weight grad", case)
            assert ran == ([] if impl == "sequential" else [impl]), (case, ran)
    finally:
        del AR.run
        dispatch.clear_memory()


def _matrix_worker(rank, W, seed, overlaps):
    _matrix(rank, W, seed, overlaps)
    _dgrad_follows_dispatch(rank, W, seed + 500)
    _column_dgrad_all_reduce_follows_dispatch(rank, W, seed + 600)
    _main_grad_regathers_in_parts(rank, W, seed + 700)
    _mappings(rank, W, seed)
    _api(rank, W, seed)


# ---- mappings ------------------------------------------------------------------------------------

def _mappings(rank, W, seed):
    from fluxlite.parallel import mappings as M

    g = torch.Generator().manual_seed(seed + 7)
    # every rank draws every rank's tensors, so the expectations are plain slicing and sums
    n0, nl = 4 * W, 2 * W
    xs = torch.randn(W, n0, 3, nl, dtype=torch.float64, generator=g)  # rank p's input: xs[p]
    gs = torch.randn(W, n0, 3, nl, dtype=torch.float64, generator=g)  # rank p's upstream grad, same shape
    tall = torch.randn(W, W * n0, 3, nl, dtype=torch.float64, generator=g)  # ... of a first-dim gather
    wide = torch.randn(W, n0, 3, W * nl, dtype=torch.float64, generator=g)  # ... of a last-dim gather
    r0, r1 = rank * n0 // W, (rank + 1) * n0 // W  # this rank's slice of a first dim of n0
    c0, c1 = rank * nl // W, (rank + 1) * nl // W  # ... of a last dim of nl

    def check(name, fn, expected_out, upstream, expected_grad, **kw):
        x = xs[rank].clone().requires_grad_()
        out = fn(x, **kw)
        _close(out, expected_out, f"{name} forward", {})
        out.backward(upstream)
        _close(x.grad, expected_grad, f"{name} backward", {})

    check("copy_to_tensor_model_parallel_region", M.copy_to_tensor_model_parallel_region,
          xs[rank], gs[rank], gs.sum(0))
    check("reduce_from_tensor_model_parallel_region", M.reduce_from_tensor_model_parallel_region,
          xs.sum(0), gs[rank], gs[rank])
    check("scatter_to_tensor_model_parallel_region", M.scatter_to_tensor_model_parallel_region,
          xs[rank][..., c0:c1], gs[rank][..., c0:c1],
          torch.cat([gs[p][..., p * nl // W:(p + 1) * nl // W] for p in range(W)], -1))
    check("gather_from_tensor_model_parallel_region", M.gather_from_tensor_model_parallel_region,
          torch.cat(list(xs), -1), wide[rank], wide[rank][..., rank * nl:(rank + 1) * nl])
    check("scatter_to_sequence_parallel_region", M.scatter_to_sequence_parallel_region,
          xs[rank][r0:r1], gs[rank][r0:r1], torch.cat([gs[p][p * n0 // W:(p + 1) * n0 // W] for p in range(W)], 0))
    check("gather_from_sequence_parallel_region", M.gather_from_sequence_parallel_region,
          torch.cat(list(xs), 0), tall[rank], tall[:, rank * n0:(rank + 1) * n0].sum(0))
    check("gather_from_sequence_parallel_region(tensor_parallel_output_grad=False)",
          M.gather_from_sequence_parallel_region, torch.cat(list(xs), 0), tall[rank],
          tall[rank][rank * n0:(rank + 1) * n0], tensor_parallel_output_grad=False)
    check("reduce_scatter_to_sequence_parallel_region", M.reduce_scatter_to_sequence_parallel_region,
          xs.sum(0)[r0:r1], gs[rank][: n0 // W], torch.cat([gs[p][: n0 // W] for p in range(W)], 0))
    with pytest.raises(ValueError, match="divisible"):
        M.scatter_to_sequence_parallel_region(torch.zeros(W + 1, 2, dtype=torch.float64))
    with pytest.raises(NotImplementedError):
        M.gather_from_sequence_parallel_region(xs[rank], output_split_sizes=[n0] * W)


# ---- the layer API -------------------------------------------------------------------------------

def _api(rank, W, seed):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear

    init = _init(seed)
    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float64)
    col = ColumnParallelLinear(8, 4 * W, config=cfg, init_method=init, bias=True, tp_comm_buffer_name="qkv")
    row = RowParallelLinear(4 * W, 8, config=cfg, init_method=init, bias=True, input_is_parallel=True,
                            skip_bias_add=True, tp_comm_buffer_name="proj")
    # Megatron's names, shapes and TP attributes
    assert dict((k, tuple(v.shape)) for k, v in col.state_dict().items() if v is not None) == {
        "weight": (4, 8), "bias": (4,)}
    assert tuple(row.weight.shape) == (8, 4) and tuple(row.bias.shape) == (8,)
    assert "_extra_state" in col.state_dict() and "_extra_state" in row.state_dict()
    for p, dim in ((col.weight, 0), (col.bias, 0), (row.weight, 1)):
        assert p.tensor_model_parallel and p.partition_dim == dim and p.partition_stride == 1 and p.allreduce
    assert row.bias.sequence_parallel is True and not hasattr(row.bias, "tensor_model_parallel")
    assert col.output_size_per_partition == 4 and row.input_size_per_partition == 4
    # a state_dict without _extra_state (a plain one) and with it (Megatron's) both load
    sd = {k: v for k, v in col.state_dict().items() if k != "_extra_state"}
    col.load_state_dict(sd)
    col.load_state_dict(col.state_dict())
    assert col.backward_dw() is None
    # skip_weight_param_allocation: the weight comes with forward
    ext = ColumnParallelLinear(8, 4 * W, config=cfg, init_method=init, bias=False, skip_weight_param_allocation=True)
    assert ext.weight is None
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="skip_weight_param_allocation"):
        ext(x)
    w = col.weight.detach().clone().requires_grad_()
    out, _ = ext(x, weight=w)
    ref, _ = col(x)
    _close(out, (ref - col.bias).detach(), "external weight output", {})
    with pytest.raises(RuntimeError, match="shape"):
        ext(x, weight=w[:, :4])
    # runtime_gather_output overrides gather_output
    full, _ = col(x, runtime_gather_output=True)
    assert full.shape == (2 * W, 3, 4 * W)
    # frozen weight and an input that needs no grad: no collective is skipped on one rank only
    col.weight.requires_grad_(False)
    out, _ = col(x.clone().requires_grad_())
    out.sum().backward()
    assert col.weight.grad is None and col.bias.grad is not None
    # newer Megatron keywords: accepted; the ones set to something fluxlite ignores warned about once;
    # `name` (which Megatron's own modules pass and its layers ignore) silently
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            RowParallelLinear(4 * W, 8, config=cfg, init_method=init, bias=False, input_is_parallel=True,
                              skip_bias_add=False, name="decoder.0.proj", pg_collection=None,
                              output_dtype=torch.float32)
    messages = [str(c.message) for c in caught]
    assert sum("output_dtype=" in m for m in messages) == 1 and not any("name=" in m for m in messages), messages
    with pytest.raises(ValueError, match="overlap"):
        RowParallelLinear(4 * W, 8, config=cfg, init_method=init, bias=False, input_is_parallel=True,
                          skip_bias_add=False, overlap="fast")
    with pytest.raises(NotImplementedError, match="is_expert"):
        ColumnParallelLinear(8, 4 * W, config=cfg, init_method=init, is_expert=True)
    with pytest.raises(TypeError, match="config"):
        ColumnParallelLinear(8, 4 * W, config=object(), init_method=init)
    with pytest.raises(ValueError, match="divisible"):
        ColumnParallelLinear(8, 4 * W + 1, config=cfg, init_method=init)
    with pytest.raises(ValueError, match="divisible"):  # SP reduce-scatters the sequence dim
        RowParallelLinear(4 * W, 8, config=cfg, init_method=init, bias=False, input_is_parallel=True,
                          skip_bias_add=False)(torch.randn(W + 1, 2, 4, dtype=torch.float64))
    # a bad input is named by the layer before any GEMM or collective, with and without sequence
    # parallelism (without it the Column forward is a local GEMM that torch would reject in its own words)
    plain = ModelParallelConfig(sequence_parallel=False, params_dtype=torch.float64)
    for config in (cfg, plain):
        c = ColumnParallelLinear(8, 4 * W, config=config, init_method=init, bias=True)
        r = RowParallelLinear(4 * W, 8, config=config, init_method=init, bias=True, input_is_parallel=True,
                              skip_bias_add=False)
        for layer, k in ((c, 8), (r, 4)):
            name = type(layer).__name__
            with pytest.raises(TypeError, match=f"{name} expects input of its weight's dtype .*float64.*float32"):
                layer(torch.randn(2 * W, 2, k, dtype=torch.float32))
            with pytest.raises(ValueError, match=f"{name} expects input on its weight's device .*cpu.*meta"):
                layer(torch.randn(2 * W, 2, k, dtype=torch.float64, device="meta"))
            with pytest.raises(ValueError, match=rf"{name} expects input \[\.\.\., {k}\] \(at least 2-D\)"):
                layer(torch.randn(k, dtype=torch.float64))
            with pytest.raises(TypeError, match=f"{name} expects a torch.Tensor"):
                layer([[0.0] * k])
    # the repr says what the layer computes: its activation where it has one
    gelu = ColumnParallelLinear(8, 4 * W, config=cfg, init_method=init, bias=True, activation="gelu")
    assert "activation='gelu'" in repr(gelu) and "activation" not in repr(col), (repr(gelu), repr(col))
    # copy.deepcopy (an EMA or reference model): parameters of its own with Megatron's TP attributes,
    # the process group and config shared; the copy computes the same and trains apart from the original
    import copy

    for config in (cfg, plain):
        pair = torch.nn.ModuleList([
            ColumnParallelLinear(8, 4 * W, config=config, init_method=init, bias=True),
            RowParallelLinear(4 * W, 8, config=config, init_method=init, bias=True, input_is_parallel=True,
                              skip_bias_add=False)])
        twin = copy.deepcopy(pair)
        x = torch.randn(2 * W, 2, 8, dtype=torch.float64)
        for a, b in zip(pair.parameters(), twin.parameters()):
            assert a is not b and a.data_ptr() != b.data_ptr() and torch.equal(a, b)
            assert {k: v for k, v in vars(a).items() if not isinstance(v, torch.Tensor)} == vars(b)
        assert twin[0].tp_group is pair[0].tp_group and twin[1].config is pair[1].config
        _close(twin[1](twin[0](x)[0])[0], pair[1](pair[0](x)[0])[0].detach(), "deep copy output", {})
        twin[1](twin[0](x)[0])[0].sum().backward()
        assert all(p.grad is None for p in pair.parameters()) and all(p.grad is not None for p in twin.parameters())


# ---- the tests -----------------------------------------------------------------------------------

def test_layers_mappings_api_2_ranks():
    run_ranks(_matrix_worker, 2, SEED, ("sequential", "fused"), timeout_s=60)


def test_layers_mappings_api_4_ranks():
    run_ranks(_matrix_worker, 4, SEED, ("sequential", "fused"), timeout_s=60)


def test_single_rank_group_disables_sequence_parallel():
    run_ranks(_single_rank_worker, 1, SEED)


def _single_rank_worker(rank, W, seed):
    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig

    cfg = ModelParallelConfig(sequence_parallel=True, params_dtype=torch.float64)
    with pytest.warns(UserWarning, match="Disabling sequence parallel"):
        layer = ColumnParallelLinear(8, 4, config=cfg, init_method=_init(seed), keep_master_weight_for_test=True)
    assert layer.sequence_parallel is False
    with pytest.warns(UserWarning, match="keep_gathered_input=True has been removed and is ignored"):
        ColumnParallelLinear(8, 4, config=cfg, init_method=_init(seed), keep_gathered_input=True)
    x = torch.randn(5, 2, 8, dtype=torch.float64)
    out, _ = layer(x)
    _close(out, x @ layer.master_weight.t(), "TP=1 output", {})


# ---- second derivatives ----------------------------------------------------------------------------

def _second_derivative(rank, W, seed):
    """``d/dA ||d(||Row(Column(x))||²)/dx||²`` for the Column weight ``A`` against float64 on the full
    weights; without sequence parallelism at several ranks the layers refuse ``create_graph``."""
    import torch.distributed as dist

    from fluxlite.parallel import ColumnParallelLinear, ModelParallelConfig, RowParallelLinear
    from tests.test_norm_linear import _layer

    s = 2 * W
    for sp in (True, False) if W > 1 else (False,):
        cfg = ModelParallelConfig(sequence_parallel=sp, params_dtype=torch.float64)
        col = ColumnParallelLinear(16, 4 * W, config=cfg, init_method=_init(seed), bias=False, overlap="fused")
        row = RowParallelLinear(4 * W, 16, config=cfg, init_method=_init(seed + 1), bias=False, input_is_parallel=True,
                                skip_bias_add=False, overlap="fused")
        x_full = torch.randn(s, 3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 2))
        rows = slice(rank * s // W, (rank + 1) * s // W) if sp else slice(None)
        x = x_full[rows].clone().requires_grad_()
        y = row(col(x)[0])[0]
        if W > 1 and not sp:  # refused where the graph would be built, before any collective
            with pytest.raises(NotImplementedError, match="create_graph=True"):
                torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
            y.sum().backward()  # a plain backward on the same graph still runs
            assert col.weight.grad is not None and torch.isfinite(col.weight.grad).all()
            continue
        (g,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
        (got,) = torch.autograd.grad(g.pow(2).sum(), col.weight)
        A = [torch.empty_like(col.weight) for _ in range(W)]
        dist.all_gather(A, col.weight.detach())
        B = [torch.empty_like(row.weight) for _ in range(W)]
        dist.all_gather(B, row.weight.detach().contiguous())
        A, B = torch.cat(A).requires_grad_(), torch.cat(B, dim=1)
        xr = x_full.clone().requires_grad_()
        (gr,) = torch.autograd.grad(((xr @ A.t()) @ B.t()).pow(2).sum(), xr, create_graph=True)
        (want,) = torch.autograd.grad(gr.pow(2).sum(), A)  # every rank's rows of g, summed over the ranks
        n = col.weight.shape[0]
        torch.testing.assert_close(got, want[rank * n : (rank + 1) * n], **TOL, msg=lambda m: f"sp={sp} {m} {_seed_msg()}")
    # the deferred norm's backward recomputes from detached tensors: it refuses a second derivative
    norm = _layer(W, "RMSNorm", W > 1, True, "fused" if W > 1 else "sequential", torch.float32, False)
    xn = torch.randn(2 * W, 3, norm.input_size, requires_grad=True)
    (gn,) = torch.autograd.grad(norm(xn[rank * 2 : (rank + 1) * 2] if W > 1 else xn)[0].pow(2).sum(), xn,
                                create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gn.pow(2).sum().backward()


@pytest.mark.parametrize("world_size", [1, 2])
def test_second_derivatives_are_exact_or_refused(world_size):
    """``create_graph=True`` through the layers: the sequence-parallel custom ops differentiate their
    collectives (exact against float64 at two ranks), the all-reduces of the path without sequence
    parallelism are not, so at several ranks it raises instead of answering wrong; one rank is exact."""
    run_ranks(_second_derivative, world_size, SEED)
