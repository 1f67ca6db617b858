"""Bad input raises the documented ValueError/TypeError, naming the argument and the expected and
actual values, before any communication (README, API: Errors).

Most cases run in this process under a 1-rank gloo group. The 2-rank test runs the same table on
each rank while the other rank sits outside every collective (it waits on the store, not on the
group), with a 5 s gloo timeout: a bad call that reached any collective would block and fail, not
raise the documented error. It also covers M not divisible by W, which needs W > 1.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import fluxlite
from fluxlite.host_flags import resolve_timeout

from .dist_utils import run_ranks


def _t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


def _cases(world_size: int):
    """(id, op, args, kwargs, exception type, fragments every message must contain)."""
    W = world_size
    m, K, N = 4, 16, 6
    a, w, b = _t(m, K), _t(N, K), _t(N)
    A = _t(W * m, K)  # gemm_rs input: M = W*m rows
    meta = dict(device="meta")
    cases = []
    for op, x, out_shape in (("ag_gemm", a, (W * m, N)), ("gemm_rs", A, (m, N))):
        rows = out_shape[0]
        cases += [
            (f"{op}-out-shape", op, (x, w), {"out": _t(rows + 1, N)}, ValueError, ["out", str(out_shape), f"({rows + 1}, {N})"]),
            (f"{op}-out-dtype", op, (x, w), {"out": _t(*out_shape, dtype=torch.bfloat16)}, TypeError, ["out.dtype", "torch.float32", "torch.bfloat16"]),
            (f"{op}-out-device", op, (x, w), {"out": _t(*out_shape, **meta)}, ValueError, ["out", "cpu", "meta"]),
            (f"{op}-out-non-contiguous", op, (x, w), {"out": _t(N, rows).t()}, ValueError, ["out must be contiguous", "got strides (1, "]),
            (f"{op}-out-not-tensor", op, (x, w), {"out": [0.0]}, TypeError, ["out", "list"]),
        ]
        # An out that shares memory with an input: every impl would read what it overwrites.
        n_out = out_shape[0] * N
        x_over = _t(max(x.numel(), n_out))
        x_view = x_over[:x.numel()].view(x.shape)
        w_over = _t(max(w.numel(), n_out))
        b_over = _t(n_out + N)
        cases += [
            (f"{op}-out-overlaps-a", op, (x_view, w), {"out": x_over[:n_out].view(out_shape)}, ValueError,
             ["out must not share memory with a"]),
            (f"{op}-out-overlaps-weight", op, (x, w_over[:w.numel()].view(w.shape)),
             {"out": w_over[:n_out].view(out_shape)}, ValueError, ["out must not share memory with weight"]),
            (f"{op}-out-overlaps-bias", op, (x, w, b_over[n_out - 1:n_out - 1 + N]),
             {"out": b_over[:n_out].view(out_shape)}, ValueError, ["out must not share memory with bias"]),
        ]
        cases += [
            (f"{op}-K-mismatch", op, (x, _t(N, K + 3)), {}, ValueError, ["weight", f"== {K}", f"got {K + 3}"]),
            (f"{op}-a-3d", op, (x.reshape(1, *x.shape), w), {}, ValueError, [f"{op}: a must be 2-D", "3-D"]),
            (f"{op}-a-1d", op, (x.flatten(), w), {}, ValueError, [f"{op}: a must be 2-D", "1-D"]),
            (f"{op}-weight-3d", op, (x, w.reshape(1, N, K)), {}, ValueError, [f"{op}: weight must be 2-D", "3-D"]),
            (f"{op}-a-not-tensor", op, (x.tolist(), w), {}, TypeError, ["a must be a torch.Tensor", "list"]),
            (f"{op}-a-int", op, (x.long(), w.long()), {}, TypeError, ["a.dtype", "torch.int64"]),
            (f"{op}-weight-dtype", op, (x, w.bfloat16()), {}, TypeError, ["weight.dtype", "torch.float32", "torch.bfloat16"]),
            (f"{op}-bias-dtype", op, (x, w, b.double()), {}, TypeError, ["bias.dtype", "torch.float32", "torch.float64"]),
            (f"{op}-bias-shape", op, (x, w, _t(N + 1)), {}, ValueError, ["bias", f"[{N}]", f"({N + 1},)"]),
            (f"{op}-bias-2d", op, (x, w, _t(1, N)), {}, ValueError, ["bias", f"[{N}]", f"(1, {N})"]),
            (f"{op}-weight-other-device", op, (x, _t(N, K, **meta)), {}, ValueError, ["weight", "cpu", "meta"]),
            (f"{op}-bias-other-device", op, (x, w, _t(N, **meta)), {}, ValueError, ["bias", "cpu", "meta"]),
            (f"{op}-device-backend-cannot-serve", op, (x.to("meta"), w.to("meta")), {}, ValueError, ["meta", "cpu"]),
            (f"{op}-unknown-impl", op, (x, w), {"impl": "fast"}, ValueError, ["impl", "'fast'", "sequential", "fused", "auto"]),
            (f"{op}-impl-none", op, (x, w), {"impl": None}, ValueError, ["impl", "None"]),
            (f"{op}-timeout-negative", op, (x, w), {"timeout": -1}, ValueError, ["timeout", "-1"]),
            (f"{op}-timeout-str", op, (x, w), {"timeout": "5"}, ValueError, ["timeout", "'5'"]),
            (f"{op}-timeout-inf", op, (x, w), {"timeout": float("inf")}, ValueError, ["timeout", "finite", "inf"]),
            (f"{op}-group-not-a-group", op, (x, w), {"group": "world"}, TypeError, ["group", "ProcessGroup", "str"]),
        ]
    if W > 1:
        M = W * m + 1
        cases.append(("gemm_rs-M-not-divisible", "gemm_rs", (_t(M, K), w), {}, ValueError,
                      ["M = %d" % M, f"divisible by the group size ({W})", f"remainder {M % W}"]))
    return cases


def _check_raises(case, group=None) -> None:
    name, op, args, kwargs, exc, fragments = case
    kwargs = dict(kwargs)
    if group is not None and "group" not in kwargs:
        kwargs["group"] = group
    with pytest.raises(exc) as info:
        getattr(fluxlite, op)(*args, **kwargs)
    msg = str(info.value)
    missing = [f for f in fragments if f not in msg]
    assert not missing, f"{name}: message {msg!r} lacks {missing}"


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        fluxlite.release_workspaces()
        dist.destroy_process_group()


@pytest.mark.parametrize("case", _cases(1), ids=lambda c: c[0])
def test_bad_input_one_rank(one_rank_group, case):
    _check_raises(case)


def test_no_process_group():
    assert not dist.is_initialized(), "a test leaked an initialised process group"
    with pytest.raises(ValueError, match="initialised process group"):
        fluxlite.ag_gemm(_t(4, 8), _t(3, 8))
    with pytest.raises(ValueError, match="initialised process group"):
        fluxlite.gemm_rs(_t(4, 8), _t(3, 8))
    with pytest.raises(ValueError, match="initialised process group"):
        fluxlite.get_workspace()


@pytest.mark.parametrize("value", ["abc", "0", "-3", "nan"])
def test_bad_timeout_env_var_names_the_variable(one_rank_group, monkeypatch, value):
    monkeypatch.setenv("FLUXLITE_TIMEOUT_S", value)
    with pytest.raises(ValueError, match=re.escape(f"FLUXLITE_TIMEOUT_S must be a positive number of seconds, got {value!r}")):
        fluxlite.ag_gemm(_t(4, 8), _t(3, 8))


def test_timeout_resolution_order(monkeypatch):
    monkeypatch.delenv("FLUXLITE_TIMEOUT_S", raising=False)
    assert resolve_timeout(None) == fluxlite.DEFAULT_TIMEOUT_S
    monkeypatch.setenv("FLUXLITE_TIMEOUT_S", "7.5")
    assert resolve_timeout(None) == 7.5
    assert resolve_timeout(2) == 2.0  # the argument wins over the environment
    fluxlite.set_default_timeout(3.0)
    try:
        assert resolve_timeout(None) == 3.0  # the process-wide setting wins over the environment
        assert resolve_timeout(1.5) == 1.5
    finally:
        fluxlite.set_default_timeout(None)
    assert resolve_timeout(None) == 7.5
    with pytest.raises(ValueError, match="timeout"):
        fluxlite.set_default_timeout(0)
    for value in (float("inf"), 1e10):  # every wait is bounded, in int64 nanoseconds on the GPU
        with pytest.raises(ValueError, match="a finite number of seconds"):
            resolve_timeout(value)
        with pytest.raises(ValueError, match="a finite number of seconds"):
            fluxlite.set_default_timeout(value)
    monkeypatch.setenv("FLUXLITE_TIMEOUT_S", "inf")
    with pytest.raises(ValueError, match="FLUXLITE_TIMEOUT_S must be a finite number of seconds"):
        resolve_timeout(None)


def test_non_contiguous_and_world_size_one_are_served(one_rank_group):
    """W = 1 needs no communication; non-contiguous operands are copied, not misread."""
    a, w, b = _t(10, 9).t(), _t(10, 5).t(), _t(20)[::4]  # a [9, 10], w [5, 10], b [5]
    assert not (a.is_contiguous() or w.is_contiguous() or b.is_contiguous())
    ref = a.double() @ w.double().t() + b.double()
    for impl in ("sequential", "fused", "auto"):
        out, gathered = fluxlite.ag_gemm(a, w, b, impl=impl, return_gathered=True)
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(gathered, a)
        torch.testing.assert_close(fluxlite.gemm_rs(a, w, b, impl=impl).double(), ref, rtol=1e-5, atol=1e-5)


# ---- 2 ranks: the same table, with no rank ever entering a collective ---------------------------


def _two_ranks(rank: int, world_size: int) -> None:
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=5))
    store = dist.distributed_c10d._get_default_store()
    for turn in range(world_size):
        if rank == turn:
            for case in _cases(world_size):
                _check_raises(case, group)
            store.set(f"validation-done-{turn}", "1")
        else:
            store.wait([f"validation-done-{turn}"], timedelta(seconds=60))
    # A group that leaves this rank out: new_group() hands back a marker, not a group.
    alone = dist.new_group([0], backend="gloo")
    if rank != 0:
        for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
            _check_raises((f"{op}-not-a-member", op, (_t(4, 8), _t(3, 8)), {"group": alone}, ValueError,
                           ["group", f"global rank {rank}", "not a member"]))
    dist.barrier(group=group)


@pytest.mark.timeout(90)
def test_bad_input_two_ranks_raises_before_any_communication():
    run_ranks(_two_ranks, 2)
