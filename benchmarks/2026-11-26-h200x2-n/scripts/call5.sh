#!/usr/bin/env bash
# The GPU safety tests (timeouts, missing peers, mismatched calls) with the flag-copy producer.
R=/tmp/res14e; source benchmarks/2026-11-26-h200x2-n/scripts/common.sh
timeout 285 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_gpu_safety.py 2>&1 | tail -8 | tee -a $R/gpu_tests.log
