#!/usr/bin/env bash
# Shared mode (2 ranks, one GPU): GPU test files given as arguments, one pytest run each; megatron 0.19.2 on the path.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site19 .whl_all/0.19.2/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site19:$PWD
i=0
for t in "$@"; do
  i=$((i+1)); timeout ${T:-280} python3 -m pytest -m gpu -v -p no:cacheprovider --durations=5 $t > $OUT/gpu_tests_$i.log 2>&1
  echo "pytest $i ($t) rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" $OUT/gpu_tests_$i.log | tail -30
done
