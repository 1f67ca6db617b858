R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
N=$(nvidia-smi -L | wc -l)
if [ "$N" -ge 4 ]; then
  ( OUT=$R/suite CUDA_VISIBLE_DEVICES=2,3 NPROC=2 GPU_TEST_FILE_S=170 GPU_TESTS="tests/test_gpu_graphs.py" timeout 180 bash scripts/gpu_suite.sh tests > $R/suite.log 2>&1
    CUDA_VISIBLE_DEVICES=2,3 FLUXLITE_GPU_RANKS=2 timeout $((225 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "anchor or lazy or thousand or replay" > $R/fused_k.log 2>&1; echo "fused_k rc=$? at ${SECONDS}s" >> $R/suite.log ) &
fi
export CUDA_VISIBLE_DEVICES=0,1
timeout 120 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-c/scripts/smpush.py 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/smpush.log | tail -14
echo "smpush at ${SECONDS}s"
timeout $((215 - SECONDS)) python3 -m fluxlite.profile --shape ag:16,8192,2560 --shape ag:256,8192,2560 --shape ag:512,4096,4096 --nproc 2 --impls fused,torch_symm_mem,auto --rounds 5 --time-limit $((200 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A5 'op, M x K' | head -8
wait
tail -6 $R/suite.log; tail -3 $R/fused_k.log
