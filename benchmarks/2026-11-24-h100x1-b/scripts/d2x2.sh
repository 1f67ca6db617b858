#!/usr/bin/env bash
# On 2 real GPUs: bisect the megatron,fused crash of bench_layers.
# Not yet run (no 2-GPU machine in the ninth session). From the repo root, with .whl/ carried.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
SMALL="--hidden 4096 --ffn 11008 --heads 32 --kv-heads 8 --seq 4096 --batch 1 --warmup 3 --iters 6 --rounds 2"
run() { name=$1; shift; env "$@" timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-24-h100x1-b/scripts/layers_diag.py $SMALL $ARGS > $OUT/$name.log 2>&1; echo "== $name rc=$?"; grep -v "^W1" $OUT/$name.log | grep -E "Error|DIAG|variant|speedup|Fatal|File \"/work" | head -14; }
ARGS="--modes megatron,fused" run mf DIAG_CTX=1
ARGS="--modes megatron,fused" run mf_nographs DIAG_NO_GRAPHS=1
ARGS="--modes fused" run f_only DIAG_CTX=1
ARGS="--modes sequential,fused --column-input regather" run sf_reg DIAG_CTX=1
