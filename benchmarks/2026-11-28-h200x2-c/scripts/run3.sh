R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
N=$(nvidia-smi -L | wc -l)
if [ "$N" -ge 4 ]; then
  ( OUT=$R/suite CUDA_VISIBLE_DEVICES=2,3 NPROC=2 GPU_TEST_FILE_S=200 GPU_TESTS="tests/test_gpu_graphs.py tests/test_gpu_random.py" timeout 420 bash scripts/gpu_suite.sh tests > $R/suite.log 2>&1;
    OUT=$R/suite_b CUDA_VISIBLE_DEVICES=2,3 NPROC=2 GPU_TEST_FILE_S=$((530 - SECONDS)) GPU_TESTS="tests/test_gpu_fused.py" timeout $((540 - SECONDS)) bash scripts/gpu_suite.sh tests >> $R/suite.log 2>&1; echo "suite done at ${SECONDS}s" >> $R/suite.log ) &
fi
export CUDA_VISIBLE_DEVICES=0,1
timeout 300 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-c/scripts/smpush.py 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/smpush.log | tail -14
echo "smpush at ${SECONDS}s"
timeout $((520 - SECONDS)) python3 -m fluxlite.profile --shape ag:16,8192,2560 --shape ag:128,8192,7168 --shape ag:512,8192,2560 --shape ag:1024,4096,4096 --shape ag:2048,8192,2560 --nproc 2 --impls fused,torch_symm_mem,auto --rounds 5 --time-limit $((500 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A12 'op, M x K' | head -30
wait
cat $R/suite.log | tail -12
if [ "$N" -lt 4 ]; then
  OUT=$R/suite CUDA_VISIBLE_DEVICES=0,1 GPU_TEST_FILE_S=150 GPU_TESTS="tests/test_gpu_graphs.py tests/test_gpu_random.py" timeout $((585 - SECONDS)) bash scripts/gpu_suite.sh tests 2>&1 | tail -5
fi
