#!/usr/bin/env bash
# Shared mode: the random-shape GPU tests. Args: pytest -k expression (optional). Env W (ranks), T (timeout).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
export FLUXLITE_GPU_RANKS=${W:-2} PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout ${T:-550} python3 -m pytest -m gpu -v -x -p no:cacheprovider --durations=8 tests/test_gpu_random.py ${1:+-k "$1"} > $OUT/random_w${W:-2}.log 2>&1
echo "rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|rel err|differ|Error" $OUT/random_w${W:-2}.log | head -60
