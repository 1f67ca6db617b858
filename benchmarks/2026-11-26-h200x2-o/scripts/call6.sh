#!/usr/bin/env bash
# Every preset shape against the overlap limit with the current code (AG push's flag copies in its eager replays).
R=/tmp/res15f; source .scratch/s15/common.sh
(nvidia-smi dmon -s pc -d 2 > $R/dmon.log 2>&1 &)
timeout 285 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 \
  --impls fused,torch_symm_mem --rounds 5 --no-progress --time-limit 265 --out $R/presets 2>&1 | grep -v '^W1' | grep -v measured > $R/presets.log; tail -2 $R/presets.log
pkill -f "nvidia-smi dmon" || true
