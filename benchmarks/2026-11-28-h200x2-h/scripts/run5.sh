R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The GPU test files that ran past their bounds in the fourth call's three lanes, in two lanes.
UNTIL=300; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:295 &
lane tests/test_gpu_gemm_ar.py:150 tests/test_gpu_epilogue.py:120 &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
