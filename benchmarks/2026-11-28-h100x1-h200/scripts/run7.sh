R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt; nvidia-smi topo -m > $R/topo.txt 2>&1
N=$(nvidia-smi -L | wc -l)
CUDA_VISIBLE_DEVICES=0,1 timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h100x1-h200/scripts/bias_ab.py 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/bias_ab.log | tail -12
echo "ab at ${SECONDS}s"
OUT=$R/suite GPU_TEST_FILE_S=260 GPU_TESTS="tests/test_gpu_fused.py tests/test_gpu_epilogue.py tests/test_gpu_cublaslt.py tests/test_gpu_graphs.py tests/test_inference_mode.py tests/test_gpu_gemm_ar.py" \
  timeout 340 bash scripts/gpu_suite.sh tests 2>&1 | tail -10
echo "suite at ${SECONDS}s"
