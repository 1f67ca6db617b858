"""fluxlite.parallel on 2 GPUs (NCCL): the CPU layer matrix of tests/test_parallel.py in bfloat16 with
``overlap="fused"`` and ``"sequential"``, and in float32 (sequential), against the float64 reference.
Parameters are made on the GPU (``use_cpu_initialization=False``: the master weight is drawn on
the device). And ``torch.compile(fullgraph=True)`` (inductor) of scripts/train_gpt.py's model in
bf16 with the fused ops, against eager (tests/test_compile_cpu.py's check). Skipped without 2 GPUs.

    PYTHONPATH=$PWD python -m pytest -m gpu tests/test_parallel_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from tests.test_parallel import SEED, _matrix

GPU_SIZE = dict(s=256, b=2, K=512, N=1024)
BF16_TOL = 1e-2  # relative error of the norm; bf16 rounding of outputs/grads is ~4e-3
FP32_TOL = 1e-5


def _gpu_matrix(rank, W, seed, dtype, overlaps, tol):
    _matrix(rank, W, seed, overlaps, dtype=dtype, device="cuda", tol=tol, size=GPU_SIZE)
    torch.cuda.synchronize()
    import fluxlite

    fluxlite.synchronize()  # raise any timeout a fused kernel recorded


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,overlaps,tol", [
    (torch.bfloat16, ("fused", "sequential"), BF16_TOL),
    (torch.float32, ("sequential",), FP32_TOL),
], ids=["bf16", "fp32"])
def test_layer_matrix_2_gpus(dtype, overlaps, tol):
    from tests.gpu_utils import run_gpu_ranks

    run_gpu_ranks(_gpu_matrix, 2, SEED, dtype, overlaps, tol)


# The GPU shapes of tests/test_train_gpt.py. bf16: a compiled graph rounds where it fuses, so grads are
# compared by the relative error of their norm; the losses to train_gpt --check's bf16 tolerance.
GPT_GPU_ARGS = ("--device", "cuda", "--dtype", "bf16", "--overlap", "fused", "--hidden", "256", "--heads", "8",
                "--seq", "256", "--batch", "8", "--vocab", "512")


def _compiled_gpt(rank, W):
    from tests.test_compile_cpu import gpt_compiled_vs_eager

    gpt_compiled_vs_eager(rank, W, "inductor", GPT_GPU_ARGS, 3e-2, 2e-2)
    torch.cuda.synchronize()
    import fluxlite

    fluxlite.synchronize()  # raise any timeout a fused kernel recorded


@pytest.mark.gpu
def test_train_gpt_model_compiles_fullgraph_2_gpus():
    from tests.gpu_utils import run_gpu_ranks, shared_gpus

    if shared_gpus():  # eager calls take the plain collective there (fluxlite.library.start_all_gather_rows)
        pytest.skip("2 ranks on one GPU: the compiled head's all-gather is torch's functional one, which crashes "
                    "on gloo-served CUDA tensors (pytorch/pytorch#152645)")

    run_gpu_ranks(_compiled_gpt, 2, limit_s=300)


# tests/test_layer_activation.py's cases in bf16 on the GPU: every activation, with and without sequence
# parallelism, fused and sequential; K off 64 and an output not a multiple of a tile.
ACT_GPU_SIZE = (192, 2, 200, 2 * 360)  # s, b, K, N (N: output_size, the gate and up rows for SwiGLU)


def _gpu_activation_cases(rank, W):
    from tests.test_layer_activation import _cases

    _cases(rank, W, dtype=torch.bfloat16, device="cuda", tol=BF16_TOL, size=ACT_GPU_SIZE)
    torch.cuda.synchronize()
    import fluxlite

    fluxlite.synchronize()  # raise any timeout a fused kernel recorded


@pytest.mark.gpu
def test_column_layer_activations_2_gpus():
    from tests.gpu_utils import run_gpu_ranks

    run_gpu_ranks(_gpu_activation_cases, 2)
