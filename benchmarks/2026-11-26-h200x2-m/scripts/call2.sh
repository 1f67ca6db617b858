#!/usr/bin/env bash
# Graph replay host times by graph content; GPU tests of the kept code.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13b; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD
timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s13/graph_host.py 2>&1 | grep -v "^W1\|Warning\|symm_mem" | tee $R/graph_host.log
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "recurring or replay or missing or growth" 2>&1 | tail -2 | tee -a $R/tests.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py tests/test_gpu_gemm_ar.py 2>&1 | tail -2 | tee -a $R/tests.log
