R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 560e12f with the padded GEMM as landed and rs_whole_rows.patch as saved (gated by pays_to_pad).
# GEMM-RS on whole output rows gated by pays_to_pad: the random GPU tests alone, the one-shot and recurring cases.
git log --oneline -1 > $R/commit.txt 2>/dev/null
UNTIL=200; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:195 &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py tests/test_whole_rows.py -k "small_gemm_rs or recurring_eager or whole_rows or padded or reference_impls" > $R/tests/fused_rs.log 2>&1
  echo "fused one-shot/recurring + whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_rs.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt; echo "done at ${SECONDS}s"
