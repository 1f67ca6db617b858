#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py 2>&1 | tail -3 | tee $R/t_graphs.log
for mt in llama3-70b:16384 qwen2.5-72b:8192 qwen2.5-72b:16384 gpt3-175b:4096 gpt3-175b:16384 llama3-8b:16384 llama3-8b:4096; do
  model=${mt%:*}; tokens=${mt#*:}
  timeout 100 python3 -m fluxlite.profile --model "$model" --tp 2 --tokens "$tokens" --nproc 2 \
    --ops rs --impls fused,torch_symm_mem --rounds 5 --no-progress --out "$R/models/${model}_$tokens" 2>&1 \
    | tee "$R/models_${model}_$tokens.log" | grep -v '^W1' | grep "RS "
done
