R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The final code: GEMM-AllReduce's GPU tests (random whole-row shapes; captured graphs, on whole rows among them), then
# the random suite (GEMM-RS and AG-GEMM, whose fused call's views moved into data_views), 20 cases a seed.
mkdir -p $R/tests
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py tests/test_whole_rows.py > $R/tests/gemm_ar.log 2>&1
echo "gemm_ar + whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/gemm_ar.log)" | tee -a $R/summary.txt
t0=$SECONDS; FLUXLITE_RANDOM_CASES=20 FLUXLITE_GPU_RANKS=2 timeout $((480 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py > $R/tests/random.log 2>&1
echo "random (20 cases): rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/random.log)" | tee -a $R/summary.txt
grep -E "FAILED|Error" $R/tests/*.log | head -20
true
