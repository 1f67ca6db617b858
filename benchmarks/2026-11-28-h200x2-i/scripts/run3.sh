R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 43075a6.
# The arrived-peer grace and the 64-bit timeout on the GPU: four ranks on two GPUs (the missing peer
# twice), the safety file, the missing-peer cases, then the random shapes alone.
UNTIL=330; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( for i in 1 2; do t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py \
    -k "at_every_gpu and missing_peer" > $R/tests/shared4_$i.log 2>&1
  echo "shared W=4 missing_peer $i: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4_$i.log)" >> $R/summary.txt; done
  t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py \
    -k "at_every_gpu and (fused_shapes or gemm_ar or small_chunks)" > $R/tests/shared4_ops.log 2>&1
  echo "shared W=4 ops: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4_ops.log)" >> $R/summary.txt ) &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_safety.py > $R/tests/safety.log 2>&1
  echo "safety: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/safety.log)" >> $R/summary.txt
  t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k missing_peer > $R/tests/fused_mp.log 2>&1
  echo "fused missing_peer: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_mp.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "tests done at ${SECONDS}s"
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout $((560 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_random.py > $R/tests/random.log 2>&1
echo "random: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/random.log)" | tee -a $R/summary.txt
echo "done at ${SECONDS}s"
