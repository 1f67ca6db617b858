"""Every kernel variant compiles for sm_90 and fits an H100/H200 block's shared memory.

The interpreter tests (test_kernels.py) run the kernels' logic; they cannot see what only the real
compiler rejects. This compiles each variant through Triton's CUDA backend, which needs no GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_kernels_compile_for_hopper():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "compile_kernels.py")
    run = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    # 8 (TMA, K-major, bias) x 2 ops in bf16, 8 AG epilogue variants (4 activations x TMA), the TMA
    # operands with pointer-stored outputs (bias x 2 ops, and SwiGLU), GEMM-AllReduce's one-shot
    # reduction (an aligned output with a bias, an unaligned one without; both must load 16-byte
    # vectors), 2 in fp16, the parity-alignment kernel, the matmul consumers' bounded wait,
    # GEMM-AllReduce's gather end (its push and its pull copying 16-byte vectors; its crop of whole
    # rows into rows off 16 bytes loading them), AG-GEMM's push
    # of a small chunk by the SMs (16-byte vectors), and the copy between row pitches in bf16, fp16
    # and fp32, each by words (a pad: no access narrower than a word) and by elements (a crop:
    # 16-byte loads)
    assert run.stdout.count("ok ") == 44, run.stdout
