export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
flt() { grep -v "^W1126\|OMP_NUM\|FutureWarn\|enable_symm_mem\|^\[rank.\]:  \|^  File\|^    "; }
FLUXLITE_TIMEOUT_S=15 timeout 80 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-i/scripts/consumers.py "rs:8192,4096,8192 rs:6000,5000,7000 ar:4096,8192,8192" 2>&1 | flt | tail -8 | tee $OUT/consumers5.log
for f in tests/test_gpu_gemm_ar.py tests/test_gpu_fused.py tests/test_gpu_safety.py tests/test_gpu_graphs.py; do
  timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -12 | tee -a $OUT/tests5.log
done
