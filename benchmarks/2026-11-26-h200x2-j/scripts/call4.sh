#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cublaslt.py 2>&1 | tail -4 | tee $R/t_cublaslt.log
OUT=$R timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-j/scripts/trace_rs.py "8192,4096,8192" 2>&1 | grep -v '^W1' | tail -3
for mt in llama3-70b:8192 llama3-8b:8192 gpt3-175b:8192 llama3-70b:4096 qwen2.5-72b:4096; do
  model=${mt%:*}; tokens=${mt#*:}
  timeout 100 python3 -m fluxlite.profile --model "$model" --tp 2 --tokens "$tokens" --nproc 2 \
    --ops rs --impls fused,torch_symm_mem --rounds 5 --no-progress --out "$R/models/${model}_$tokens" 2>&1 \
    | tee "$R/models_${model}_$tokens.log" | grep -v '^W1' | grep "RS "
done
timeout 70 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee $R/t_ar.log
FLUXLITE_RANDOM_CASES=30 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py -k "fused_ops and 1" 2>&1 | tail -3 | tee $R/t_random.log
