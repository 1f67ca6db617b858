R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p /tmp/code_cb9fd7d && git archive cb9fd7d fluxlite scripts | tar -x -C /tmp/code_cb9fd7d  # the earlier code, beside this checkout's
# The SMs' gather with a program of its own for the alignment, and the alignment's state store plain where
# ready flags publish the signatures: GPU tests (three lanes), then small AG calls against the previous commit.
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
S="ag:8,8192,5120 ag:8,8192,28672"
for i in 1 2; do
timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee -a $R/small_b.log
echo "b done at ${SECONDS}s"
PYTHONPATH=/tmp/code_cb9fd7d:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee -a $R/small_a.log
echo "a done at ${SECONDS}s"
S="ag:8,8192,28672 ag:8,8192,5120"
done
echo "done at ${SECONDS}s"
