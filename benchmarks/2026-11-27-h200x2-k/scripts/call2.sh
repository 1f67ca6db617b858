#!/usr/bin/env bash
# Two GPUs: diag.py (forced fused vs the default config named vs sequential vs auto, per round) with clocks logged.
R=/tmp/res30b; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
nvidia-smi --query-gpu=index,timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $R/diag_smi.csv 2>&1 &
SMI=$!
timeout 240 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/diag.py 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/diag.log; echo "diag rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/diag.log
kill $SMI
