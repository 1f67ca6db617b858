#!/usr/bin/env bash
# One H100, two ranks sharing it: the cuBLASLt call and both matmul consumers at random shapes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=30 PYTHONPATH=$PWD FLUXLITE_GPU_SHARE=1
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
git log -1 --format=%h > $R/commit.txt
timeout 80 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cublaslt.py 2>&1 | tail -3 | tee $R/t_cublaslt.log
FLUXLITE_RANDOM_CASES=16 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py -k matmul_consumers 2>&1 | tail -4 | tee $R/t_matmul.log
