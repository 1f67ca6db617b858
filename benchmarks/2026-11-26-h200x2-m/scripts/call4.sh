#!/usr/bin/env bash
# Every preset shape with the latency mode's new method (the second of two aligned calls); GPU graph tests.
R=/tmp/res13d; source benchmarks/2026-11-26-h200x2-m/scripts/common.sh
(nvidia-smi dmon -s pc -d 2 > $R/dmon.log 2>&1 &)
timeout 260 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 \
  --impls fused,torch_symm_mem --rounds 5 --no-progress --out $R/presets 2>&1 | grep -v '^W1' | grep -v measured > $R/presets.log; tail -1 $R/presets.log
pkill -f "nvidia-smi dmon" || true
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py 2>&1 | tail -2 | tee -a $R/tests.log
