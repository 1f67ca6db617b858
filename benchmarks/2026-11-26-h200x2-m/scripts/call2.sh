#!/usr/bin/env bash
# Graph replay host times by graph content; GPU tests of the kept code.
R=/tmp/res13b; source benchmarks/2026-11-26-h200x2-m/scripts/common.sh
timeout 100 torchrun --standalone --nproc-per-node 2 $HERE/graph_host.py 2>&1 | grep -v "^W1\|Warning\|symm_mem" | tee $R/graph_host.log
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "recurring or replay or missing or growth" 2>&1 | tail -2 | tee -a $R/tests.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py tests/test_gpu_gemm_ar.py 2>&1 | tail -2 | tee -a $R/tests.log
