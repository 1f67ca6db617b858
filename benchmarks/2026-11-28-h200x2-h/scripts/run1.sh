R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p /tmp/code_2669713 && git archive 2669713 fluxlite scripts | tar -x -C /tmp/code_2669713  # the earlier code, beside this checkout's
# The SMs' gather with its alignment in one launch: GPU tests of the paths it touches (three lanes), then
# small AG calls, new against the previous commit's code, one process each.
UNTIL=275; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 265 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_fused.py \
    -k "small_chunks or first_call or thousand or recurring_eager or missing_peer or replayed_calls_timeout or reallocated" > $R/tests/fused.log 2>&1
  echo "fused subset: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)" >> $R/summary.txt ) &
lane tests/test_gpu_graphs.py:200 tests/test_inference_mode.py:70 &
( t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_world_sizes.py \
    -k "at_every_gpu and (fused_shapes or gemm_ar or missing_peer)" > $R/tests/shared4.log 2>&1
  echo "shared W=4: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt
  FLUXLITE_GPU_RANKS=2 timeout $((270 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_safety.py -k "missing_peer_at_each_point or mismatch" > $R/tests/safety.log 2>&1
  echo "safety: rc=$? :: $(tail -1 $R/tests/safety.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "tests done at ${SECONDS}s"
S="ag:8,8192,28672 ag:8,8192,5120 ag:64,8192,28672 ag:256,8192,28672"
timeout 130 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee $R/small_new.log
echo "new done at ${SECONDS}s"
PYTHONPATH=/tmp/code_2669713:/tmp/site timeout 130 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee $R/small_old.log
echo "old done at ${SECONDS}s"
if (( SECONDS < 520 )); then
  timeout $((580 - SECONDS)) torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ag:8,8192,28672 ag:64,8192,28672 --out $R/trace > $R/trace.log 2>&1
  grep -v "^W1\|Warning\|warn" $R/trace.log | tail -40
fi
echo "done at ${SECONDS}s"
