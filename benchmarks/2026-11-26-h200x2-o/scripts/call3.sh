#!/usr/bin/env bash
# One shot (flat kernel) against two shots at 8-128 MiB, interleaved; the profiler's GPU test with its preset count fixed.
R=/tmp/res15c; source .scratch/s15/common.sh
PATHS=1 OUT=$R timeout 330 torchrun --standalone --nproc-per-node 2 .scratch/s15/ar_ab.py "1024,5000,4096 2048,4096,4096 1024,14336,8192 2048,4096,8192 4096,4096,4096 2048,14336,8192 2048,28672,8192 3072,5000,7000 4096,8192,6144 4096,2048,8192 4096,8192,8192 8192,4096,8192" 7 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_paths.log; grep "^ar " $R/ar_paths.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_profile_cli.py -k llama3 2>&1 | grep -v "^W1\|Warning\|enable_symm" | tail -60 > $R/profile_cli.log; grep -A3 "Error\|passed\|failed" $R/profile_cli.log | tail -12
