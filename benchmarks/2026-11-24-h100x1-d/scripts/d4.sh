#!/usr/bin/env bash
# Shared mode (2 ranks, one GPU): GPU test files as arguments, one pytest run each.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for t in "$@"; do
  name=$(basename ${t%% *} .py); timeout ${T:-280} python3 -m pytest -m gpu -v -p no:cacheprovider --durations=5 $t > $OUT/$name.log 2>&1
  echo "pytest $t rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" $OUT/$name.log | tail -30
done
