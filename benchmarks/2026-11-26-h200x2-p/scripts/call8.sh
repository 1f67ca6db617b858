#!/usr/bin/env bash
# Every fused GPU test with the final code; the profile test (llama3-70b preset, auto against the best).
R=/tmp/res16h; source .scratch/s16/common.sh
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_gpu_fused.py 2>&1 | tail -8 | tee -a $R/gpu_tests.log
timeout 150 python3 -m pytest -q -m gpu tests/test_profile_cli.py -k llama3 -x > $R/profile_cli.log 2>&1; tail -3 $R/profile_cli.log
