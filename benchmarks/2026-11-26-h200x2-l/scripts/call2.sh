#!/usr/bin/env bash
# GPU tests touching the matmul consumers and graphs; auto at 16 shapes (profiler with kept outputs); graph replays.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15 PYTHONPATH=$PWD
R=/tmp/res12b; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
for t in tests/test_gpu_gemm_ar.py tests/test_gpu_cublaslt.py "tests/test_gpu_random.py::test_matmul_consumers_at_random_shapes_match_float32" tests/test_gpu_graphs.py tests/test_gpu_fused.py; do
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider "$t" 2>&1 | tail -2 | tee -a $R/tests.log
done
A="ag:1,8192,4096 ag:48,5120,13824 ag:700,8192,3584 ag:2048,4096,11008 ag:5000,6144,6144 ag:16384,8192,5120 ag:512,8192,4096 ag:64,8192,14336
   ag:1536,5120,6912 rs:4,8192,5120 rs:300,11008,4096 rs:1024,4096,8192 rs:3000,7168,7168 rs:12288,9664,4160 rs:8192,14336,8192 rs:256,14336,8192"
timeout 200 python3 -m fluxlite.profile --tune $(for s in $A; do echo --shape $s; done) --nproc 2 --impls sequential,decomposed,fused,auto \
  --rounds 11 --time-limit 180 --no-progress --out $R/auto 2>&1 | grep -v '^W1' | grep -v measured > $R/auto.log; tail -1 $R/auto.log
