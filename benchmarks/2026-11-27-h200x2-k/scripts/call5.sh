#!/usr/bin/env bash
# Two GPUs: act30.py with the eager reading in auto's both choice: the eight seeded random shapes, AG-GEMM with GELU,
# SwiGLU and none, and GEMM-RS (rs: a [M, K] per rank), auto against the best of fused, decomposed and sequential.
R=/tmp/res30e; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
FLUXLITE_CACHE_DIR=$R/cache ACTS=gelu,swiglu,none,rs SHAPES=228x5872x3160,1050x5456x7880,1942x2384x3344,4390x2960x3216,5552x7544x2344,9070x1296x2360,13804x2688x1352,18350x2256x6896 \
  timeout 450 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/act30.py $R/act30.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/act30.log; echo "act30 rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/act30.log | cut -c1-75
