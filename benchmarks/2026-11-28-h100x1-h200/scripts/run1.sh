R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt; nvidia-smi topo -m > $R/topo.txt 2>&1
N=$(nvidia-smi -L | wc -l)
MB=32 timeout 90 torchrun --standalone --nproc-per-node $N benchmarks/2026-11-28-h100x1-h200/scripts/smbw.py 2>&1 | grep -v '^W1' | tail -30 | tee $R/smbw_w$N.log
CUDA_VISIBLE_DEVICES=0,1 MB=32 timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h100x1-h200/scripts/smbw.py 2>&1 | grep -v '^W1' | tail -30 | tee $R/smbw_w2.log
echo "bw at ${SECONDS}s"
OUT=$R/suite GPU_TEST_FILE_S=150 GPU_TESTS="tests/test_gpu_random.py tests/test_parallel_megatron_ddp.py tests/test_profile_cli.py tests/test_train_gpt.py tests/test_norm_linear_megatron.py tests/test_gpu_cublaslt.py" \
  timeout 400 bash scripts/gpu_suite.sh tests 2>&1 | tail -20
echo "suite rc=$? at ${SECONDS}s"
