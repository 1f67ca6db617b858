R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 43075a6.
# The random shapes alone, then the missing-peer cases; GEMM-AllReduce's file beside them.
UNTIL=290; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:190 &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 80 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py > $R/tests/gemm_ar.log 2>&1
  echo "gemm_ar: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/gemm_ar.log)" >> $R/summary.txt
  t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "missing_peer" > $R/tests/fused_mp.log 2>&1
  echo "fused missing_peer: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_mp.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
