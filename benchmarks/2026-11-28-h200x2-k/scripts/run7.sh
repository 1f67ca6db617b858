R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 13095f5 (the K padding by one copy landed).
# The landed K padding by one copy (zero_padded, a K-major weight kept K-major or made row-major in one pass):
# the random fused-op cases (ten a seed: transposed weights, K off 8) and the matmul consumers, bounded.
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
t0=$SECONDS; FLUXLITE_RANDOM_CASES=10 FLUXLITE_GPU_RANKS=2 timeout 165 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_gpu_random.py -k "fused_ops or matmul_consumers" > $R/tests/random10.log 2>&1
echo "random (10 cases a seed): rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/random10.log)" >> $R/summary.txt; cat $R/summary.txt
