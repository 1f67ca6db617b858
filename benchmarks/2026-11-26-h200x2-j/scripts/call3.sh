#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R
OUT=$R timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-j/scripts/trace_rs.py "8192,4096,8192 4096,14336,8192" 2>&1 | grep -v '^W1' | tail -5
for mt in llama3-8b:8192 qwen2.5-72b:4096 qwen2.5-72b:8192 qwen2.5-72b:16384; do
  model=${mt%:*}; tokens=${mt#*:}
  timeout 150 python3 -m fluxlite.profile --model "$model" --tp 2 --tokens "$tokens" --nproc 2 \
    --ops rs --impls fused,torch_symm_mem --rounds 5 --no-progress --out "$R/models/${model}_$tokens" 2>&1 \
    | tee "$R/models_${model}_$tokens.log" | grep -v '^W1' | grep "RS "
done
tar czf $OUT/res.tgz -C $R .
