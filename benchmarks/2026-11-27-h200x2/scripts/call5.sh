#!/usr/bin/env bash
# The CUDA-graph GPU tests on the final code (counts as events, the gather end's kernels).
R=/tmp/res20e; source $(dirname $0)/common.sh
timeout 270 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_graphs.py 2>&1 | tail -12 | tee $R/gpu_tests.log
