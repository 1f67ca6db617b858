#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
python3 .scratch/s12/probe.py plain; python3 .scratch/s12/probe.py exp
timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s12/diag3.py --modes megatron,fused --iters 8 --rounds 2 2>&1 | grep -E "DIAG|speedup|Error" | head
