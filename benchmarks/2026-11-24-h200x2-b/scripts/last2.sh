#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
echo "== old"; (cd .scratch/s12/oldtree && PYTHONPATH=$PWD timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "empty_cache" 2>&1 | grep -E "passed|failed|AssertionError" | head -4)
echo "== new"; PYTHONPATH=$PWD timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "empty_cache" 2>&1 | grep -E "passed|failed|AssertionError" | head -4
