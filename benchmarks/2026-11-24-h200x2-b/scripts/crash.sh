#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=benchmarks/2026-11-24-h100x1-b/scripts/layers_diag.py
run() { name=$1; shift; env "$@" timeout 110 torchrun --standalone --nproc-per-node 2 $D $ARGS > $OUT/$name.log 2>&1; echo "== $name rc=$?"; grep -v "^W1" $OUT/$name.log | grep -E "Error|DIAG|variant|speedup|Fatal|File \"/|megatron |fused |sequential |auto |Llama" | grep -v "site-packages/torch/distributed" | head -24; }
ARGS="--modes megatron,sequential,fused,auto" run full DIAG_CTX=1
ARGS="--modes sequential,fused,auto" run nomeg DIAG_CTX=1
ARGS="--modes megatron,fused" run mf DIAG_NO_GRAPHS=1
