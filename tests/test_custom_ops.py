"""fluxlite's custom ops (:mod:`fluxlite.library`) on CPU ranks (gloo): torch.library's own checks
(``opcheck``), shape propagation under ``FakeTensorMode`` (concrete and symbolic), the fake
implementations' errors against the eager ones, and the registered autograd against float64
references.

References: every rank draws the global operands from one seed and keeps its slice; the float64
reference is autograd over the whole (unsharded) problem with the loss ``sum_ranks (out_r * c_r)``,
so each rank's gradients are the global gradients' slices. Tolerances: tests/numerics.py (fp32:
``1e-5 * (|ref| + rms(ref))``). Every rank runs in deterministic mode, which fills every
``torch.empty`` with NaN, so an output element that is never written fails.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
import torch.distributed as dist

from .dist_utils import run_ranks
from .numerics import check, poison_empty_tensors, randn

SEED = int(os.environ.get("FLUXLITE_TEST_SEED", "20261123"))
F32 = torch.float32
# (rows per rank, K, N): AG's m or RS's M/W. One row block; ragged blocks over two CPU blocks of 64.
SHAPES = [(5, 24, 7), (70, 33, 20)]
# Which of (a, weight, bias) require grad: all; the weight alone (a frozen input); a alone (frozen weights).
GRAD_CASES = [(True, True, True), (False, True, True), (True, False, False)]


# ---- float64 references over the whole problem ------------------------------------------------------

def _leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return t.detach().clone().requires_grad_(requires_grad)


def _ag_problem(gen, W, rank, m, K, N):
    """Global AG-GEMM operands: ``a_full [W*m, K]``, ``w_full [W*N, K]`` (rank p owns rows
    ``[p*N, (p+1)*N)``), ``b_full [W*N]``, loss weights ``c_full [W*m, W*N]``; and rank's slices."""
    a_full, w_full, b_full, c_full = (randn(gen, *s, dtype=F32) for s in ((W * m, K), (W * N, K), (W * N,), (W * m, W * N)))
    cols = slice(rank * N, (rank + 1) * N)
    mine = dict(a=a_full[rank * m : (rank + 1) * m], weight=w_full[cols], bias=b_full[cols], c=c_full[:, cols])
    return (a_full, w_full, b_full, c_full), mine


def _ag_reference(full, W, rank, m, N, scale):
    """float64 ``(out, grads of (a, weight, bias))`` of this rank's slice."""
    a_full, w_full, b_full, c_full = (_leaf(t.double(), True) for t in full)
    out_full = (a_full @ w_full.t()) * (1.0 if scale is None else scale) + b_full
    (out_full * c_full).sum().backward()
    cols = slice(rank * N, (rank + 1) * N)
    return out_full[:, cols].detach(), (a_full.grad[rank * m : (rank + 1) * m], w_full.grad[cols], b_full.grad[cols])


def _rs_problem(gen, W, rank, mc, K, N):
    """Global GEMM-RS operands: ``a_full [W*mc, W*K]`` and ``w_full [N, W*K]`` (rank p owns columns
    ``[p*K, (p+1)*K)``), ``bias [N]`` (each rank's own leaf), loss weights ``c_full [W*mc, N]``."""
    a_full, w_full, bias, c_full = (randn(gen, *s, dtype=F32) for s in ((W * mc, W * K), (N, W * K), (N,), (W * mc, N)))
    cols, rows = slice(rank * K, (rank + 1) * K), slice(rank * mc, (rank + 1) * mc)
    mine = dict(a=a_full[:, cols], weight=w_full[:, cols], bias=bias, c=c_full[rows])
    return (a_full, w_full, bias, c_full), mine


def _rs_reference(full, W, rank, mc, K, scale):
    """float64 ``(out, grads of (a, weight, bias))`` of this rank's slice."""
    a_full, w_full, bias, c_full = (_leaf(t.double(), True) for t in full)
    rows, cols = slice(rank * mc, (rank + 1) * mc), slice(rank * K, (rank + 1) * K)
    product = (a_full @ w_full.t()) * (1.0 if scale is None else scale)
    # sum over every rank's rows of out * c; this rank's bias (its own leaf) enters its rows only
    ((product * c_full).sum() + (bias * c_full[rows]).sum()).backward()
    return (product[rows] + bias).detach(), (a_full.grad[:, cols], w_full.grad[:, cols], bias.grad)


# ---- the cases (inside the ranks) -------------------------------------------------------------------

def _autograd_cases(rank: int, W: int, failures: list[str]) -> None:
    """Each op, forward and backward through its registered autograd (with and without the scalar
    ``scale``, the one epilogue argument with a backward), against float64."""
    import fluxlite.library as fl

    gen = torch.Generator().manual_seed(SEED)
    for (rows, K, N), impl, op, grads, scale in itertools.product(
            SHAPES, ("sequential", "fused"), ("ag_gemm", "ag_gemm_gathered", "gemm_rs"), GRAD_CASES, (None, 0.75)):
        name = f"{op} W={W} r={rank} rows={rows} K={K} N={N} impl={impl} requires_grad(a, w, b)={grads} scale={scale}"
        if op == "gemm_rs":
            full, mine = _rs_problem(gen, W, rank, rows, K, N)
            ref_out, ref_grads = _rs_reference(full, W, rank, rows, K, scale)
        else:
            full, mine = _ag_problem(gen, W, rank, rows, K, N)
            ref_out, ref_grads = _ag_reference(full, W, rank, rows, N, scale)
        a, weight, bias = (_leaf(mine[k], g) for k, g in zip(("a", "weight", "bias"), grads))
        if op == "gemm_rs":
            out = fl.gemm_rs(a, weight, bias, impl=impl, scale=scale)
        elif op == "ag_gemm":
            out = fl.ag_gemm(a, weight, bias, impl=impl, scale=scale)
        else:
            out, gathered = fl.ag_gemm(a, weight, bias, impl=impl, return_gathered=True, scale=scale)
            if gathered.requires_grad or not torch.equal(gathered, full[0]):
                failures.append(f"{name}: gathered must equal all_gather(a) and not require grad")
        check(f"{name} out", out, ref_out, F32, failures)
        (out * mine["c"]).sum().backward()
        for what, leaf, ref, wanted in zip(("grad a", "grad weight", "grad bias"), (a, weight, bias), ref_grads, grads):
            if not wanted:
                if leaf.grad is not None:
                    failures.append(f"{name}: {what} was computed, but it does not require grad")
                continue
            check(f"{name} {what}", leaf.grad, ref, F32, failures)


def _epilogue_cases(rank: int, W: int, failures: list[str]) -> None:
    """The epilogue arguments reach the eager op in their places: SwiGLU (output ``N/2`` columns),
    row scale and scale, against :func:`fluxlite.epilogue.apply` in float64 (no grad: they have none)."""
    import fluxlite.library as fl
    from fluxlite.epilogue import Epilogue, apply

    gen = torch.Generator().manual_seed(SEED + 2)
    m, K, N = 9, 16, 2 * 6
    a_full, weight, bias = randn(gen, W * m, K, dtype=F32), randn(gen, N, K, dtype=F32), randn(gen, N, dtype=F32)
    scales = torch.rand(W * m, generator=gen, dtype=F32) + 0.5
    rows = slice(rank * m, (rank + 1) * m)
    ref = apply(a_full.double() @ weight.double().t(), Epilogue("swiglu", True, 0.5), bias.double(),
                scales.double(), torch.float64)
    for impl in ("sequential", "fused"):
        with torch.no_grad():
            out = fl.ag_gemm(a_full[rows], weight, bias, impl=impl, activation="swiglu", row_scale=scales[rows],
                             scale=0.5)
        check(f"ag_gemm swiglu+row_scale+scale W={W} r={rank} impl={impl}", out, ref, F32, failures)


def _opcheck_cases(rank: int, W: int, failures: list[str]) -> None:
    """torch.library.opcheck: schema (no mutation, no aliasing), autograd registration, fake tensors
    against the real op, and AOT dispatch with dynamic shapes (forward and backward)."""
    gen = torch.Generator().manual_seed(SEED + 1)
    group_name = dist.group.WORLD.group_name
    m, K, N = 9, 16, 12

    def args(*shape_a, n=N):
        a = randn(gen, *shape_a, dtype=F32).requires_grad_()
        return a, randn(gen, n, a.shape[1], dtype=F32).requires_grad_(), randn(gen, n, dtype=F32).requires_grad_()

    cases = [(torch.ops.fluxlite.ag_gemm.default, (*args(m, K), group_name, "fused", None, None, None, None)),
             (torch.ops.fluxlite.ag_gemm_gathered.default, (*args(m, K), group_name, "fused", None, None, None, None)),
             (torch.ops.fluxlite.gemm_rs.default, (*args(W * m, K), group_name, "fused", None, None)),
             (torch.ops.fluxlite.gemm_rs.default, (*args(W * m, K)[:2], None, group_name, "sequential", 5.0, None))]
    for op, op_args in cases:
        result = torch.library.opcheck(op, op_args)
        if any(v != "SUCCESS" for v in result.values()):
            failures.append(f"opcheck {op} W={W} r={rank}: {result}")


def _fake_cases(rank: int, W: int, failures: list[str]) -> None:
    """Shape propagation with no communication: concrete shapes, then symbolic ones; and the fake
    implementations raise the eager ops' errors for bad input."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext, statically_known_true

    gn = dist.group.WORLD.group_name
    ops = torch.ops.fluxlite
    m, K, N = 6, 10, 4
    with FakeTensorMode():
        a, w, b = torch.empty(m, K), torch.empty(N, K), torch.empty(N)
        shapes = {"ag_gemm": ops.ag_gemm(a, w, b, gn, "fused", None, None, None, None).shape,
                  "ag_gemm_gathered": tuple(t.shape for t in ops.ag_gemm_gathered(a, w, None, gn, "auto", None, None, None, None)),
                  "gemm_rs": ops.gemm_rs(torch.empty(W * m, K), w, b, gn, "fused", None, None).shape}
        shapes["ag_gemm swiglu"] = ops.ag_gemm(a, torch.empty(2 * N, K), None, gn, "fused", None, "swiglu",
                                               torch.empty(m), 2.0).shape
    want = {"ag_gemm": (W * m, N), "ag_gemm_gathered": ((W * m, N), (W * m, K)), "gemm_rs": (m, N),
            "ag_gemm swiglu": (W * m, N)}
    for op, shape in shapes.items():
        got = tuple(shape) if op != "ag_gemm_gathered" else tuple(tuple(s) for s in shape)
        if got != want[op]:
            failures.append(f"fake {op}: shape {got}, expected {want[op]}")

    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.DYNAMIC])
    sa, sw = (mode.from_tensor(torch.empty(s), symbolic_context=dynamic) for s in ((W * m, K), (N, K)))
    with mode:
        out, gathered = ops.ag_gemm_gathered(sa, sw, None, gn, "fused", None, None, None, None)
        reduced = ops.gemm_rs(sa, sw, None, gn, "fused", None, None)
    for what, got, expected in (("ag_gemm out rows", out.shape[0], W * sa.shape[0]),
                                ("ag_gemm gathered rows", gathered.shape[0], W * sa.shape[0]),
                                ("ag_gemm out cols", out.shape[1], sw.shape[0]),
                                ("gemm_rs out rows", reduced.shape[0], sa.shape[0] // W)):
        if not statically_known_true(got == expected):
            failures.append(f"symbolic {what}: {got}, expected {expected}")

    bad = {"K mismatch": (ops.ag_gemm, lambda t: (t(m, K), t(N, K + 1), None, gn, "fused", None, None, None, None)),
           "bias length": (ops.ag_gemm_gathered, lambda t: (t(m, K), t(N, K), t(N + 1), gn, "fused", None, None, None, None)),
           "unknown impl": (ops.gemm_rs, lambda t: (t(W * m, K), t(N, K), None, gn, "fast", None, None)),
           "rows not divisible": (ops.gemm_rs, lambda t: (t(W * m + 1, K), t(N, K), None, gn, "fused", None, None)),
           "odd swiglu weight": (ops.ag_gemm, lambda t: (t(m, K), t(N + 1, K), None, gn, "fused", None, "swiglu", None, None)),
           "row_scale length": (ops.ag_gemm, lambda t: (t(m, K), t(N, K), None, gn, "fused", None, None, t(m + 1), None)),
           "unknown group": (ops.gemm_rs, lambda t: (t(W * m, K), t(N, K), None, "no-such-group", "fused", None, None))}
    for case, (op, make) in bad.items():
        errors = []
        for fake in (False, True):
            try:
                if fake:
                    with FakeTensorMode():
                        op(*make(torch.randn))
                else:
                    op(*make(torch.randn))
                errors.append(None)
            except (ValueError, TypeError) as exc:
                errors.append((type(exc), str(exc)))
        if errors[0] is None or errors[0] != errors[1]:
            failures.append(f"bad input '{case}': eager raised {errors[0]}, fake raised {errors[1]}")


def _all_cases(rank: int, W: int) -> None:
    import fluxlite.library  # noqa: F401  (registers the ops)

    poison_empty_tensors()
    failures: list[str] = []
    _fake_cases(rank, W, failures)
    _autograd_cases(rank, W, failures)
    _epilogue_cases(rank, W, failures)
    _opcheck_cases(rank, W, failures)
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:40])


@pytest.mark.timeout(120)
def test_custom_ops_two_ranks():
    run_ranks(_all_cases, 2)


def _one_rank(rank: int, W: int) -> None:
    """With one rank the gathered input is ``a`` itself; the op must still return a fresh tensor."""
    import fluxlite.library as fl

    poison_empty_tensors()
    a = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(3, 8, requires_grad=True)
    out, gathered = fl.ag_gemm(a, w, return_gathered=True, impl="fused")
    assert gathered.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    assert torch.equal(gathered, a.detach())
    torch.testing.assert_close(out, a.detach() @ w.detach().t(), rtol=1e-6, atol=1e-6)
    failures: list[str] = []
    _opcheck_cases(rank, W, failures)
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(60)
def test_custom_ops_one_rank():
    run_ranks(_one_rank, 1)


# ---- bad use with no process group (this process has none) -----------------------------------------

@pytest.mark.parametrize("kwargs, error, words", [
    (dict(impl="fast"), ValueError, "impl must be one of"),
    (dict(timeout=-1.0), ValueError, "timeout must be None or a positive number"),
    (dict(), ValueError, "group: fluxlite needs an initialised process group"),
])
def test_bad_use_raises_before_dispatch(kwargs, error, words):
    import fluxlite.library as fl

    if dist.is_initialized():
        pytest.skip("this process has a process group")
    for call in (lambda: fl.ag_gemm(torch.randn(4, 3), torch.randn(2, 3), **kwargs),
                 lambda: fl.gemm_rs(torch.randn(4, 3), torch.randn(2, 3), **kwargs)):
        with pytest.raises(error, match=words):
            call()


def test_schemas_are_functional():
    """No argument is mutated and no output aliases an input (outputs are fresh tensors)."""
    import fluxlite.library  # noqa: F401  (registers the ops)

    for name in ("ag_gemm", "ag_gemm_gathered", "gemm_rs"):
        schema = getattr(torch.ops.fluxlite, name).default._schema
        assert not schema.is_mutable, f"fluxlite::{name} is marked mutable: {schema}"
        assert all(arg.alias_info is None for arg in (*schema.arguments, *schema.returns)), str(schema)
        assert [a.name for a in schema.arguments][:6] == ["a", "weight", "bias", "group_name", "impl", "timeout"]


def test_row_scale_without_backward_raises_before_communication():
    """A row scale on inputs that require grad has no backward in the op: NotImplementedError before
    any communication (this process has no process group, so it cannot have communicated)."""
    import fluxlite.library as fl

    a, w = torch.randn(4, 3, requires_grad=True), torch.randn(2, 3)
    with pytest.raises(NotImplementedError, match="row_scale has no backward"):
        fl.ag_gemm(a, w, row_scale=torch.ones(4))
