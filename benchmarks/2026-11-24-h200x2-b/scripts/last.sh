#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT=$PWD
(cd .scratch/s12/oldtree && PYTHONPATH=$PWD timeout 80 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "empty_cache" 2>&1 | grep -E "passed|failed|Error|assert|Segmentation|signal" | head -8)
echo "== megatron tests (0.16.1)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site:$ROOT timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron_ddp.py tests/test_norm_linear_megatron.py 2>&1 | tail -5
