#!/usr/bin/env bash
# GPU tests of this code (the suite as scripts/gpu_suite.sh runs it: one bounded pytest per file).
R=/tmp/res22e; source .scratch/s22/common.sh
: > $R/gpu_tests.log
for f in tests/test_gpu_graphs.py tests/test_gpu_gemm_ar.py tests/test_profile_cli.py tests/test_gpu_fused.py; do
  timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -5 | tee -a $R/gpu_tests.log
  echo "$f at ${SECONDS}s" | tee -a $R/gpu_tests.log
done
