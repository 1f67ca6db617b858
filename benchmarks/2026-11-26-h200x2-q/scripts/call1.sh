#!/usr/bin/env bash
# Verify the current code on GPU: random shapes, safety, graphs, epilogue, parallel layers.
R=/tmp/res17a; source .scratch/s17/common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
for f in tests/test_gpu_random.py tests/test_gpu_safety.py tests/test_gpu_graphs.py tests/test_gpu_epilogue.py tests/test_parallel_gpu.py; do
  left=$((560 - SECONDS)); [ $left -lt 30 ] && { echo "$f skipped (time)"; continue; }
  timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -2 $R/$(basename $f .py).log
done
