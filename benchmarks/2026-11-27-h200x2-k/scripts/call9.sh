#!/usr/bin/env bash
# Two GPUs: the Megatron GPTModel step (bench_gpt.py: Megatron's layers, fluxlite fused, fluxlite auto) with this tree.
R=/tmp/res30i; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
FLUXLITE_CACHE_DIR=$R/cache timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt.log; echo "gpt rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A5 "^ *mode" $R/gpt.log
