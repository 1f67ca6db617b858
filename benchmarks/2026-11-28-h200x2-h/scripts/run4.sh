R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p /tmp/code_2669713 && git archive 2669713 fluxlite scripts | tar -x -C /tmp/code_2669713  # the earlier code, beside this checkout's
# The GPU test files the earlier calls did not run on this code (three lanes), then the alignment kernel's time in
# small GEMM-RS and GEMM-AllReduce calls, this code against the code before the SMs' gather aligned its calls.
UNTIL=290; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_fused.py \
    -k "not (small_chunks or first_call or thousand or recurring_eager or missing_peer or replayed_calls_timeout or reallocated)" > $R/tests/fused_rest.log 2>&1
  echo "fused rest: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_rest.log)" >> $R/summary.txt
  lane tests/test_gpu_epilogue.py:60 tests/test_gpu_cublaslt.py:30 ) &
lane tests/test_gpu_random.py:230 tests/test_gpu_gemm_ar.py:90 &
lane tests/test_parallel_gpu.py:200 tests/test_parallel_megatron.py:80 &
wait
cat $R/summary.txt
echo "tests done at ${SECONDS}s"
for t in new old; do
  [ $t = old ] && P=/tmp/code_2669713:/tmp/site || P=$PYTHONPATH
  PYTHONPATH=$P timeout 60 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes rs:8,14336,8192 ar:8,14336,8192 > $R/trace_$t.log 2>&1
  echo "== $t"; grep -v "^W1\|Warning\|warn\|symm_mem.enable" $R/trace_$t.log | grep -A7 "rank 0"
done
echo "done at ${SECONDS}s"
