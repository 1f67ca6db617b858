#!/usr/bin/env bash
# Replays against eager calls over more rounds; every test of test_gpu_fused.py with the current code.
R=/tmp/res15e; source .scratch/s15/common.sh
timeout 170 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 5 --out $R/graphs.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/graphs.log; tail -8 $R/graphs.log
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_gpu_fused.py 2>&1 | tail -8 | tee -a $R/gpu_tests.log
