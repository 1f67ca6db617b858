#!/usr/bin/env bash
# GEMM-AllReduce timelines at mid sizes; the GEMM-AllReduce and profiler GPU tests with the current code.
R=/tmp/res15a; source .scratch/s15/common.sh
mkdir -p $R/traces
OUT=$R/traces timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s15/ar_trace.py "600,5000,7000 1536,5000,5000 1024,8192,8192 2048,14336,8192 3000,13824,5120 64,14336,8192" 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_trace.log; grep "==" $R/ar_trace.log
rm -f $R/traces/*.json.gz; gzip $R/traces/*.json
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_gemm_ar.py tests/test_profile_cli.py tests/test_gpu_cublaslt.py 2>&1 | tail -8 | tee -a $R/gpu_tests.log
