#!/usr/bin/env bash
# Shared mode (2 ranks, one GPU): the Megatron DDP GPU test on both wheels, the Megatron GPU
# comparison, and the safety file (ebe7c1e's replayed-backward fix).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
for v in 0.16.1 0.19.2; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site$v .whl_all/$v/*.whl
  PYTHONPATH=/tmp/site$v:$PWD timeout ${T:-230} python3 -m pytest -m gpu -v -s -p no:cacheprovider --durations=5 \
    ${MTESTS:-tests/test_parallel_megatron_ddp.py tests/test_parallel_megatron.py} > $OUT/megatron_$v.log 2>&1
  echo "== megatron $v rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|loss|kept|peak|\{" $OUT/megatron_$v.log | tail -40
done
PYTHONPATH=$PWD timeout 290 python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_gpu_safety.py > $OUT/safety.log 2>&1
echo "== safety rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" $OUT/safety.log | tail -20
