R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran with the padding at K whole only (the code of rsk, see run4.sh), before the K-off calls were padded too.
# The random GPU tests again on the machine the first call warmed (its Triton cache), GEMM-RS only padded.
git log --oneline -1 > $R/commit.txt 2>/dev/null
ls ~/.triton/cache 2>/dev/null | wc -l
UNTIL=260; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:255
cat $R/summary.txt; echo "random done at ${SECONDS}s"; grep -A8 "slowest" $R/tests/test_gpu_random.log
