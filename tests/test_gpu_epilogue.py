"""The fused epilogues on GPUs (bf16, the compiled kernels, TMA and pointer paths): every activation
with a row scale, a scalar scale and a bias, AG push and pull; every activation without a row scale,
fused and sequential; and GEMM-RS's scale, against float32
references (tests/gpu_utils.py). Tolerance: bf16's 1e-2 relative (norm) error, as
tests/test_gpu_fused.py; SwiGLU multiplies two rounded values, so 2e-2.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from fluxlite import epilogue as E

from .gpu_utils import ag_epilogue_reference, dev, rel_err, run_gpu_ranks

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
# (m rows per rank, K, N_out): a TMA-aligned Llama-width case, and a ragged one (pointer loads)
SHAPES = [(2048, 8192, 3584), (1000, 1376, 200)]


def _cases(rank, W):
    import fluxlite

    gen = torch.Generator(device=dev()).manual_seed(5)  # the same weights on every rank
    failures = []
    for (m, K, N), act in ((s, a) for s in SHAPES for a in E.ACTIVATIONS):
        w = (torch.randn(2 * N if act == "swiglu" else N, K, generator=gen, device=dev()) / K**0.5).to(BF16)
        b = torch.randn(w.shape[0], generator=gen, device=dev()).to(BF16)
        a = torch.randn(m, K, device=dev()).to(BF16)  # different rows on every rank
        s = torch.rand(m, device=dev()) + 0.5
        ref, full = ag_epilogue_reference(a, w, b, s, E.Epilogue(act, True, 0.5))
        for gathered in (False, True):
            out = torch.full((W * m, N), float("nan"), dtype=BF16, device=dev())
            res = fluxlite.ag_gemm(a, w, b, impl="fused", return_gathered=gathered, out=out, activation=act,
                                   row_scale=s, scale=0.5)
            fluxlite.synchronize()
            err = rel_err(out, ref)
            if not err < (2e-2 if act == "swiglu" else 1e-2):
                failures.append(f"ag m={m} K={K} N={N} act={act} gathered={gathered}: rel err {err:.3g}")
            if gathered and not torch.equal(res[1], full):
                failures.append(f"ag m={m} act={act}: gathered rows differ")
        # No row scale, fused and sequential
        ref, _ = ag_epilogue_reference(a, w, b, None, E.Epilogue(act, False, 0.5))
        for impl in ("fused", "sequential"):
            out = torch.full((W * m, N), float("nan"), dtype=BF16, device=dev())
            fluxlite.ag_gemm(a, w, b, impl=impl, out=out, activation=act, scale=0.5)
            fluxlite.synchronize()
            err = rel_err(out, ref)
            if not err < (2e-2 if act == "swiglu" else 1e-2):
                failures.append(f"ag {impl} m={m} K={K} N={N} act={act} no row scale: rel err {err:.3g}")
    M, K, N = 4096, 1376, 8192
    a = torch.randn(M, K, device=dev()).to(BF16)
    w = (torch.randn(N, K, device=dev()) / K**0.5).to(BF16)
    b = torch.randn(N, generator=gen, device=dev()).to(BF16)
    full = a.float() @ w.float().t()
    dist.all_reduce(full)
    ref = 0.25 * full[rank * M // W : (rank + 1) * M // W] + b.float()
    err = rel_err(fluxlite.gemm_rs(a, w, b, impl="fused", scale=0.25), ref)
    if not err < 1e-2:
        failures.append(f"rs scale=0.25: rel err {err:.3g}")
    assert not failures, "\n".join(failures)


def test_fused_epilogues_match_float32():
    run_gpu_ranks(_cases, 2)


@pytest.mark.parametrize("act", E.ACTIVATIONS)
@pytest.mark.parametrize("M,K,N", [(1000, 4096, 1376), (333, 1000, 200)], ids=["tma", "pointers"])
def test_kernel_epilogue_one_gpu(act, M, K, N):
    """The compiled kernel's epilogue alone (one GPU, no communication), bf16 vs float32."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from fluxlite.kernels.ag_gemm import gemm

    g = torch.Generator(device="cuda").manual_seed(M + N)
    a = torch.randn(M, K, generator=g, device="cuda").to(BF16)
    w = (torch.randn(2 * N if act == "swiglu" else N, K, generator=g, device="cuda") / K**0.5).to(BF16)
    b = torch.randn(w.shape[0], generator=g, device="cuda").to(BF16)
    s = torch.rand(M, generator=g, device="cuda") + 0.5
    ep = E.Epilogue(act, True, 0.5)
    out = torch.full((M, N), float("nan"), dtype=BF16, device="cuda")
    gemm(a, w, b, ep=ep, row_scale=s, out=out)
    ref = E.apply(a.float() @ w.float().t(), ep, b.float(), s, torch.float32)
    assert rel_err(out, ref) < (2e-2 if act == "swiglu" else 1e-2)
