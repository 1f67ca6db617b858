#!/usr/bin/env bash
# The presets against the limit with cuBLASLt without a workspace; GPU tests not yet run with this code.
R=/tmp/res17e; source .scratch/s17/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 & DM=$!
timeout 200 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 185 --no-progress --out $R/presets 2>&1 | grep -v '^W1\|Warning\|enable_symm' | grep -v measured > $R/presets.log; tail -1 $R/presets.log
kill $DM
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:$PYTHONPATH
for f in tests/test_gpu_graphs.py tests/test_gpu_epilogue.py tests/test_parallel_gpu.py; do
  left=$((540 - SECONDS)); [ $left -lt 30 ] && { echo "$f skipped (time)"; continue; }
  timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -1 $R/$(basename $f .py).log
done
