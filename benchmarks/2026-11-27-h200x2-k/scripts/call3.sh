#!/usr/bin/env bash
# Two GPUs: act30.py (auto with GELU and SwiGLU against the best of fused, decomposed and sequential) at eight shapes
# drawn at random (seeded), 228-18350 gathered rows, K and n multiples of 8; dispatch records kept; clocks logged.
R=/tmp/res30c; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
nvidia-smi --query-gpu=index,timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/smi.csv 2>&1 &
SMI=$!
FLUXLITE_CACHE_DIR=$R/cache SHAPES=228x5872x3160,1050x5456x7880,1942x2384x3344,4390x2960x3216,5552x7544x2344,9070x1296x2360,13804x2688x1352,18350x2256x6896 \
  timeout 400 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/act30.py $R/act30.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/act30.log; echo "act30 rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/act30.log
kill $SMI
