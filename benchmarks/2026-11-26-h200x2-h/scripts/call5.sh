#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export FLUXLITE_CACHE_DIR=$OUT/cache
nvidia-smi -L; date
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_gemm_ar.py > $OUT/gpu_gemm_ar.log 2>&1
echo "gemm_ar rc=$?"; grep -E "passed|failed|rel err|differ" $OUT/gpu_gemm_ar.log | head -6
date
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_safety.py > $OUT/gpu_safety.log 2>&1
echo "safety rc=$?"; grep -E "passed|failed|rank [01]:|expected" $OUT/gpu_safety.log | head -6
date
timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_fused.py -k "sequential or decomposed" > $OUT/gpu_fused_seq.log 2>&1
echo "fused seq rc=$?"; grep -E "passed|failed|Error" $OUT/gpu_fused_seq.log | head -6
date
S="ar:600,5000,7000 ar:1536,5000,5000 ar:2048,14336,8192 ar:8192,4096,8192"
args=""; for s in $S; do args="$args --shape $s"; done
timeout 110 python3 -m fluxlite.profile --nproc 2 --tune $args --rounds 9 --impls sequential,decomposed,fused,auto \
  --time-limit 95 --no-progress --out $OUT/ar4 2>&1 | grep -v "^W1\|warn" | tail -9 | cut -c1-200
date
