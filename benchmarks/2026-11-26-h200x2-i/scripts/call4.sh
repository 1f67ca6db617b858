export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
flt() { grep -v "^W1126\|OMP_NUM\|FutureWarn\|enable_symm_mem\|^\[rank.\]:  \|^  File\|^    "; }
timeout 90 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-i/scripts/consumers.py "rs:8192,4096,8192 ar:4096,8192,8192" 2>&1 | flt | tail -20 | tee $OUT/consumers0.log
grep -q "ar 4096x8192" $OUT/consumers0.log || exit 1
RS="rs:8192,2048,4096 rs:4096,7168,4096 rs:2048,14336,8192 rs:6000,5000,7000 rs:8192,6976,5184 rs:16384,4096,8192 rs:8192,14336,8192 rs:4096,28672,8192 rs:16384,14336,4096 rs:4096,3072,4096 rs:6144,5440,7232 rs:12288,9664,4160 rs:3000,5000,3500 rs:1024,8192,8192 rs:512,14336,8192"
AR="ar:4096,5000,7000 ar:3000,13824,5120 ar:8192,4096,8192 ar:2048,4096,8192"
timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-i/scripts/consumers.py "$RS $AR" 2>&1 | flt | tee $OUT/consumers.log
# the eighth set's ar_paths.py with timeouts of 14, 13 and 12 s, so that a hang fails fast
sed "s/62.0, 1 << 40/14.0, 1 << 40/; s/61.0, 0)/13.0, 0)/; s/60.0, DEFAULT/12.0, DEFAULT/" benchmarks/2026-11-26-h200x2-h/scripts/ar_paths.py > /tmp/ar_paths.py
timeout 100 torchrun --standalone --nproc-per-node 2 /tmp/ar_paths.py "1024,8192,8192 1536,5000,5000 2048,4096,8192 2048,14336,8192 4096,4096,4096 3000,13824,5120 600,5000,7000 4096,8192,8192" 7 2>&1 | flt | tee $OUT/ar_paths.log
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu_gemm_ar.py tests/test_gpu_random.py 2>&1 | tail -15 | tee $OUT/tests_a.log
