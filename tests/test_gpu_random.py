"""The fused ops and layers on GPUs at random shapes: what no listed shape covers.

Each case draws its shapes and options from one seeded ``random.Random`` (the same sequence on every
rank: the ops are collectives):
- ``m`` (rows per rank) from 1 up, edge sizes around the kernel's 64/128-row blocks and ragged sizes;
- ``K`` a multiple of 8 (TMA loads), or any size (pointer loads: rows not 16-byte aligned);
- ``N`` any size, small ones included;
- bf16 or fp16; the weight as ``nn.Linear`` keeps it ``[N, K]`` or as a backward passes it (``W.t()``
  of a ``[K, N]`` tensor, no copy); a bias or not;
- AG push, AG pull (``return_gathered``) or GEMM-RS; for AG an activation, a row scale and a scalar
  scale; for RS a scalar scale.

Every case runs three times on the same tensors with fresh data copied in (a training loop's calls:
the third replays from the graph the second captured), each result poisoned first and checked against
float32 torch. The workspace grows as larger cases come. Tolerance: bf16/fp16 1e-2 relative error of
the norm (tests/test_gpu_fused.py); SwiGLU multiplies two rounded values, so 2e-2.

The layer part runs tests/test_parallel.py's layer matrix (every SP/bias/gather combination, forward
and all grads against float64) in bf16 with ``overlap="fused"`` at random sizes.

    FLUXLITE_GPU_SHARE=1 PYTHONPATH=$PWD python -m pytest -m gpu tests/test_gpu_random.py
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from fluxlite import epilogue as E

from .gpu_utils import ag_epilogue_reference, dev, gpu_world_size, rel_err, rs_reference, run_gpu_ranks

pytestmark = pytest.mark.gpu

CASES = int(os.environ.get("FLUXLITE_RANDOM_CASES", "40"))
CALLS_PER_CASE = 3
EDGE_M = (1, 2, 3, 63, 64, 65, 127, 128, 129, 255, 257)


def _world_size() -> int:
    return max(2, gpu_world_size())


def draw_case(rng: random.Random) -> dict:
    """One case's shapes and options (see the module docstring)."""
    op = rng.choice(("ag", "ag_pull", "rs"))
    m = rng.choice(EDGE_M) if rng.random() < 0.4 else rng.randint(1, 3000)
    K = 8 * rng.randint(1, 640) if rng.random() < 0.7 else rng.randint(1, 3000)
    N = rng.randint(1, 64) if rng.random() < 0.2 else rng.randint(1, 4000)
    case = dict(op=op, m=m, K=K, N=N, dtype=rng.choice((torch.bfloat16, torch.float16)), seed=rng.randrange(2**31),
                weight_t=rng.random() < 0.3, bias=rng.random() < 0.6, activation=None, row_scale=False, scale=None)
    if op != "rs":
        case["activation"] = rng.choice(E.ACTIVATIONS)
        case["row_scale"] = rng.random() < 0.4
    if rng.random() < 0.4:
        case["scale"] = rng.choice((0.5, 2.0, 0.125))
    return case


def _weight(case, rows: int, gen) -> torch.Tensor:
    """``[rows, K]``: contiguous, or a transposed view of a contiguous ``[K, rows]`` (a backward's ``W.t()``)."""
    K, dtype = case["K"], case["dtype"]
    if case["weight_t"]:
        return (torch.randn(K, rows, generator=gen, device=dev()) / K**0.5).to(dtype).t()
    return (torch.randn(rows, K, generator=gen, device=dev()) / K**0.5).to(dtype)


def _run_case(case, W, gen, calls: int = CALLS_PER_CASE) -> list[str]:
    import fluxlite

    op, m, K, N, dtype = case["op"], case["m"], case["K"], case["N"], case["dtype"]
    gated = case["activation"] == "swiglu"
    shared = torch.Generator(device=dev()).manual_seed(case["seed"])  # weight and bias: the same on every rank
    w = _weight(case, 2 * N if gated else N, shared)
    bias = torch.randn(w.shape[0], generator=shared, device=dev()).to(dtype) if case["bias"] else None
    rows = W * m if op == "rs" else m
    a = torch.empty(rows, K, dtype=dtype, device=dev())
    row_scale = torch.empty(m, device=dev()) if case["row_scale"] else None
    out_rows = m if op == "rs" else W * m
    out = torch.empty(out_rows, N, dtype=dtype, device=dev())
    ep = E.Epilogue(case["activation"], row_scale is not None, 1.0 if case["scale"] is None else case["scale"])
    failures = []
    for call in range(calls):
        a.copy_(torch.randn(rows, K, generator=gen, device=dev()))
        if row_scale is not None:
            row_scale.copy_(torch.rand(m, generator=gen, device=dev()) + 0.5)
        out.fill_(float("nan"))
        if op == "rs":
            fluxlite.gemm_rs(a, w, bias, impl="fused", out=out, scale=case["scale"])
            ref = E.apply(rs_reference(a, w, None), ep, bias, None, torch.float32)
        else:
            res = fluxlite.ag_gemm(a, w, bias, impl="fused", out=out, return_gathered=op == "ag_pull",
                                   activation=case["activation"], row_scale=row_scale, scale=case["scale"])
            ref, gathered = ag_epilogue_reference(a, w, bias, row_scale, ep)
            if op == "ag_pull" and not torch.equal(res[1], gathered):
                failures.append(f"{case} call {call}: the gathered rows differ from all_gather(a)")
            if op == "ag_pull" and not res[1].is_contiguous():  # zero-padded rows (K % 8 != 0) are copied back
                failures.append(f"{case} call {call}: the gathered rows are not contiguous")
        fluxlite.synchronize()
        err = rel_err(out, ref)
        if not err < (2e-2 if gated else 1e-2):
            failures.append(f"{case} call {call}: rel err {err:.3g}")
    return failures


def _random_ops(rank, W, seed):
    rng = random.Random(seed)
    gen = torch.Generator(device=dev()).manual_seed(seed * 100 + rank)  # each rank its own rows
    failures = []
    for _ in range(CASES):
        failures += _run_case(draw_case(rng), W, gen)
    assert not failures, f"rank {rank}: {len(failures)} failed calls:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("seed", [1, 2])
def test_fused_ops_at_random_shapes_match_float32(seed):
    run_gpu_ranks(_random_ops, _world_size(), seed, limit_s=420)


# GEMM-RS cases whose partials are stored and loaded by pointer (N % 8 != 0) with a one-row block per
# chunk (129 rows per rank). Here a peer tile counted before its stores have landed shows within a
# few calls: the producer copies the split early and the reduced rows come out non-finite (about
# one call in ten, for a counter slot carried through a fused tile loop; docs/protocol.md).
POINTER_PARTIAL_CASES = [
    dict(op="rs", m=129, K=2763, N=355, dtype=torch.float16, seed=463561237, weight_t=False, bias=True,
         activation=None, row_scale=False, scale=2.0),
    dict(op="rs", m=129, K=2125, N=842, dtype=torch.float16, seed=241047738, weight_t=False, bias=True,
         activation=None, row_scale=False, scale=None),
]


def _pointer_partials(rank, W, calls):
    gen = torch.Generator(device=dev()).manual_seed(rank)
    failures = []
    for case in POINTER_PARTIAL_CASES:
        failures += _run_case(case, W, gen, calls)
    assert not failures, f"rank {rank}: {len(failures)} failed calls:\n" + "\n".join(failures[:20])


def test_rs_with_pointer_stored_partials_and_a_one_row_block_matches_float32():
    """Eager, captured and replayed calls, many of them: a race shows in some calls only."""
    run_gpu_ranks(_pointer_partials, _world_size(), 20, limit_s=240)


def draw_layer_size(rng: random.Random, W: int) -> dict:
    """Sizes of the layer matrix: ``s`` (sequence, divisible by W for SP), ``b`` (batch), ``K`` (input
    features), ``N`` (output features; divisible by 2W: the matrix's stride-2 GLU partitions)."""
    return dict(s=W * rng.randint(1, 200), b=rng.randint(1, 3), K=rng.choice((8 * rng.randint(1, 160), rng.randint(2, 1200))),
                N=2 * W * rng.randint(1, 300))


def _random_layers(rank, W, seed):
    from tests.test_parallel import _matrix

    size = draw_layer_size(random.Random(seed), W)
    _matrix(rank, W, seed, ("fused",), dtype=torch.bfloat16, device="cuda", tol=1e-2, size=size)
    import fluxlite

    fluxlite.synchronize()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_layer_matrix_at_random_sizes(seed):
    run_gpu_ranks(_random_layers, _world_size(), seed, limit_s=300)


def _matmul_consumers(rank, W, seed):
    """AG push and GEMM-RS with every fused call on the matmul consumer (its rule's size floor at 0):
    cuBLAS per split, the bounded split waits between the GEMMs, a scale and a bias in cuBLAS's
    epilogue. Counts that the consumer ran, so the case cannot pass on the Triton kernel."""
    import importlib

    import fluxlite.ops.op as op_module
    from fluxlite.ops import AG, RS

    op_module.MATMUL_MIN_FLOPS = 0
    importlib.import_module("fluxlite.ops.gemm_rs").ONE_SHOT_MAX_BYTES = 0  # no GEMM-RS call in one shot
    ran = dict(ag=0, rs=0)
    for name, op in (("ag", AG), ("rs", RS)):
        original = op._consume_by_matmul

        def counted(*args, _name=name, _original=original, **kwargs):
            ran[_name] += 1
            return _original(*args, **kwargs)

        op._consume_by_matmul = counted
    rng = random.Random(seed)
    gen = torch.Generator(device=dev()).manual_seed(seed * 100 + rank)
    failures = []
    # At least the default's 20 cases whatever FLUXLITE_RANDOM_CASES says: with fewer, every AG-GEMM
    # case can be small enough for the SMs' push, and then no AG call reaches the consumer counted below.
    for i in range(max(20, CASES // 2)):
        case = draw_case(rng)
        case.update(op=("ag", "rs")[i % 2], activation=None, row_scale=False)  # both ops at any case count
        case["N"] += -case["N"] % 8  # output rows whole 16-byte units: the rule's condition for the matmul consumer
        failures += _run_case(case, W, gen)
    assert not failures, f"rank {rank}: {len(failures)} failed calls:\n" + "\n".join(failures[:20])
    assert ran["ag"] > 0 and ran["rs"] > 0, ran


def test_matmul_consumers_at_random_shapes_match_float32():
    run_gpu_ranks(_matmul_consumers, _world_size(), 5, limit_s=300)


def _gathers(rank, W, seed):
    """AG-GEMM's transport alone (``AG.gather``, the Column backward's input for its weight grad): at
    random ``m`` and ``K`` (rows off 16 bytes included), three calls on the same tensors with fresh
    data (the third replays a graph), a fused GEMM-RS after each as in that backward; every result
    equal, bit for bit, to NCCL's all-gather of the same rows."""
    import torch.distributed as dist

    from fluxlite.group import resolve_group
    from fluxlite.ops import AG

    tp = resolve_group(None)
    rng = random.Random(seed)
    gen = torch.Generator(device=dev()).manual_seed(seed * 100 + rank)
    failures = []
    for _ in range(max(4, CASES // 4)):
        m = rng.choice(EDGE_M) if rng.random() < 0.3 else rng.randint(1, 3000)
        K = rng.choice((rng.randint(1, 512) * 8, rng.randint(1, 4000)))
        dtype = rng.choice((torch.bfloat16, torch.float16))
        a = torch.empty(m, K, device=dev(), dtype=dtype)
        for call in range(CALLS_PER_CASE):
            a.copy_(torch.randn(m, K, device=dev(), generator=gen))
            ref = torch.empty(W * m, K, device=dev(), dtype=dtype)
            dist.all_gather_into_tensor(ref, a)
            gathered = AG.gather(a, tp, 60.0)
            if not torch.equal(gathered, ref):
                failures.append(f"m={m} K={K} {dtype} call {call}: differs from NCCL's all-gather")
            torch.ops.fluxlite.gemm_rs(ref, torch.randn(8, K, device=dev(), dtype=dtype, generator=gen), None,
                                       tp.name, "fused", None, None)
    torch.cuda.synchronize()
    assert not failures, f"rank {rank}: {len(failures)} failed gathers:\n" + "\n".join(failures[:20])


def test_gathers_at_random_shapes_match_nccl():
    run_gpu_ranks(_gathers, _world_size(), 7, limit_s=300)
