#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
nvidia-smi -L
timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-j/scripts/trace_rs.py "8192,4096,8192 4096,14336,8192" 2>&1 | grep -v '^W1' | tail -5
gzip $OUT/trace_*.json
for tokens in 4096 8192 16384; do
  for model in llama3-8b llama3-70b qwen2.5-72b gpt3-175b; do
    timeout 150 python3 -m fluxlite.profile --model "$model" --tp 2 --tokens "$tokens" --nproc 2 \
      --ops rs --impls fused,torch_symm_mem --rounds 5 --no-progress --out "$OUT/models/${model}_$tokens" 2>&1 \
      | tee "$OUT/models_${model}_$tokens.log" | grep -v '^W1' | tail -6
  done
done
