R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt; nvidia-smi topo -m > $R/topo.txt 2>&1
OUT=$R/suite GPU_TESTS="tests/test_gpu_cublaslt.py" timeout 100 bash scripts/gpu_suite.sh tests 2>&1 | tail -4
echo "cublaslt at ${SECONDS}s"
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/2026-11-28-h200x2-c/scripts/biasalgo.py 2>&1 | tee $R/biasalgo.log | tail -20
echo "probe at ${SECONDS}s"
OUT=$R/suite2 GPU_TEST_FILE_S=200 GPU_TESTS="tests/test_gpu_safety.py tests/test_parallel_gpu.py" timeout 300 bash scripts/gpu_suite.sh tests 2>&1 | tail -6
echo "suite at ${SECONDS}s"
