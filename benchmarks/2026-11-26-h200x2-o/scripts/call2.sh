#!/usr/bin/env bash
# The flat one-shot kernel against the row-wise one (interleaved), and the GEMM-AllReduce GPU tests with it.
R=/tmp/res15b; source .scratch/s15/common.sh
OUT=$R timeout 260 torchrun --standalone --nproc-per-node 2 .scratch/s15/ar_ab.py "1,14336,8192 64,14336,8192 5,5000,4099 100,11008,4096 256,4096,7000 333,4000,7001 600,5000,7000 1536,5000,5000 1024,8192,8192 2048,14336,8192 3000,13824,5120 4096,4096,4096" 7 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_ab.log; grep "^ar " $R/ar_ab.log
BIAS=1 OUT=$R timeout 60 torchrun --standalone --nproc-per-node 2 .scratch/s15/ar_ab.py "600,5000,7000 333,4000,7001" 5 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_ab_bias.log; grep "^ar " $R/ar_ab_bias.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_gemm_ar.py 2>&1 | tail -4 | tee -a $R/gpu_tests.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_profile_cli.py -k llama3 2>&1 | grep -v "^W1\|Warning\|enable_symm" | tail -60 > $R/profile_cli.log; tail -25 $R/profile_cli.log
