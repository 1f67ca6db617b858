#!/usr/bin/env bash
# Two GPUs: diag2.py (a repeated auto call at small M with SwiGLU and GELU: entry points, host time, profile).
R=/tmp/res30d; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/diag2.py 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/diag2.log; echo "diag2 rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/diag2.log
