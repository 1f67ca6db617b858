#!/usr/bin/env bash
# Two GPUs: AG-GEMM with GELU and SwiGLU, the Triton kernel's epilogue against the matmul consumer + activation,

R=/tmp/res29f; source .scratch/s29/common.sh
timeout 300 torchrun --standalone --nproc-per-node 2 .scratch/s29/act.py $R/act.json 2>&1 | grep -v '^W1\|Warning\|warn' | tee $R/act.log | tail -22; echo "act rc=${PIPESTATUS[0]} at ${SECONDS}s"

