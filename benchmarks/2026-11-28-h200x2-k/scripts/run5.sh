R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at the landed code (0867fa5).
# GEMM-RS fused on whole output rows at K off 8 too, the rule's special case gone: the padding's GPU tests, the
# one-shot and recurring cases, then the random shapes (a fresh machine: Triton compiles every variant first).
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "small_gemm_rs or recurring_eager" > $R/tests/fused_rs.log 2>&1
  echo "fused one-shot/recurring: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_rs.log)" >> $R/summary.txt ) &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1
  echo "whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt; echo "tests done at ${SECONDS}s"; grep -B5 "Error\|assert" $R/tests/whole.log | head -30
UNTIL=440; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:330
tail -1 $R/summary.txt; echo "random done at ${SECONDS}s"; grep -A6 "slowest" $R/tests/test_gpu_random.log
