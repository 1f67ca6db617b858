#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
which gdb eu-stack compute-sanitizer 2>&1 | head -3; ulimit -c; cat /proc/sys/kernel/core_pattern
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=.scratch/s12/diag2.py
run() { name=$1; shift; env "$@" timeout 110 torchrun --standalone --nproc-per-node 2 $D $ARGS > $OUT/$name.log 2>&1; echo "== $name rc=$?"; grep -v "^W1" $OUT/$name.log | grep -E "Error|DIAG|variant|speedup|Fatal|File \"/work|megatron |fused |sequential |auto |Llama|^  File|destroyed" | grep -v "site-packages/torch/distributed" | head -40; }
ARGS="--modes megatron,fused" run mfg
ARGS="--modes megatron,sequential,fused,auto" run full
