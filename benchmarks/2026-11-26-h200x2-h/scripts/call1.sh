#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export FLUXLITE_CACHE_DIR=$OUT/cache
nvidia-smi -L; date; git log --oneline | head -1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version())"
S="ar:1,14336,8192 ar:8,4096,8192 ar:64,14336,8192 ar:256,4096,8192 ar:3,5000,7000 ar:100,11008,4096
ar:2048,14336,8192 ar:8192,4096,8192 ar:4096,5000,7000 ar:16384,3584,8192 ar:3000,13824,5120 ar:12288,7000,4500"
args=""; for s in $S; do args="$args --shape $s"; done
timeout 300 python3 -m fluxlite.profile --nproc 2 --tune $args --rounds 11 --impls sequential,decomposed,fused,auto \
  --time-limit 270 --no-progress --out $OUT/ar12 2>&1 | grep -v "^W1\|warn" | tail -20 | cut -c1-220
date
for f in tests/test_gpu_gemm_ar.py tests/test_gpu_safety.py; do
  timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f 2>&1 | tail -3
  date
done
