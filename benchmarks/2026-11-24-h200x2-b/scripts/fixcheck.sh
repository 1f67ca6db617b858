#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "empty_cache or recurring or growth" 2>&1 | tail -15
NPROC=2 timeout 200 bash scripts/gpu_suite.sh layers 2>&1 | tail -12
