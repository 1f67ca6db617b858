#!/usr/bin/env bash
# Graph census (memop signals vs copy signals), then the GPU tests not run in the last set.
R=/tmp/res14a; source benchmarks/2026-11-26-h200x2-n/scripts/common.sh
for v in 0 1; do
  SIGNAL_AS_COPY=$v timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-n/scripts/graph_census.py 2>&1 | grep -v '^W1' > $R/census_$v.log
  tail -9 $R/census_$v.log
done
for f in tests/test_gpu_random.py tests/test_gpu_epilogue.py tests/test_gpu_safety.py tests/test_parallel_gpu.py; do
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -4 | tee -a $R/gpu_tests.log
done
