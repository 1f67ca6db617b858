#!/usr/bin/env bash
# AG-GEMM's matmul consumer: GPU tests, then before (Triton kernel, /tmp/base: addfb01's fluxlite/) and after on 18 shapes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
git log -1 --format=%h > $R/commit.txt
SHAPES="--shape ag:8192,4096,7168 --shape ag:8192,8192,4096 --shape ag:4096,8192,14784 --shape ag:16384,4096,3072 \
 --shape ag:4096,4096,14336 --shape ag:8192,8192,5120 --shape ag:8192,5184,6976 --shape ag:6144,7232,5440 \
 --shape ag:4096,8192,29568 --shape ag:8192,8192,14784 --shape ag:16384,12288,6144 --shape ag:8192,4096,14336 \
 --shape ag:16384,4096,7168 --shape ag:4096,8192,28672 --shape ag:8192,8192,14336 --shape ag:12288,4160,9664 \
 --shape ag:4096,9280,11072 --shape ag:4096,12288,18432"
PYTHONPATH=$PWD FLUXLITE_RANDOM_CASES=16 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/test_gpu_random.py -k matmul_consumers 2>&1 | tail -4 | tee $R/t_matmul.log
PYTHONPATH=$PWD timeout 200 python3 -m fluxlite.profile $SHAPES --nproc 2 --impls fused,torch_symm_mem --rounds 3 \
  --time-limit 170 --no-progress --out $R/after 2>&1 | grep -v '^W1' | tee $R/after.log | grep "AG " | head -40
PYTHONPATH=/tmp/base timeout 200 python3 -m fluxlite.profile $SHAPES --nproc 2 --impls fused --rounds 3 \
  --time-limit 150 --no-progress --out $R/before 2>&1 | grep -v '^W1' | tee $R/before.log | grep "AG " | head -40
PYTHONPATH=$PWD timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cublaslt.py 2>&1 | tail -2 | tee $R/t_cublaslt.log
