R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Every GPU test file at HEAD, in four lanes at once (each lane's files one after another, both GPUs).
mkdir -p $R/tests
lane() {
  for spec in "$@"; do
    f=${spec%%:*}; s=${spec##*:}; n=$(basename $f .py)
    left=$((565 - SECONDS)); (( s > left )) && s=$left
    (( s < 20 )) && { echo "$n: skipped (no time)" >> $R/summary.txt; continue; }
    t0=$SECONDS
    FLUXLITE_GPU_RANKS=2 timeout $s python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 $f > $R/tests/$n.log 2>&1
    echo "$n: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/$n.log)" >> $R/summary.txt
  done
}
lane tests/test_gpu_fused.py:480 tests/test_gpu_cublaslt.py:60 tests/test_gpu_epilogue.py:90 &
lane tests/test_gpu_random.py:300 tests/test_gpu_gemm_ar.py:150 tests/test_parallel_gpu.py:100 tests/test_inference_mode.py:100 &
lane tests/test_gpu_safety.py:360 tests/test_gpu_graphs.py:250 &
lane tests/test_parallel_megatron.py:200 tests/test_parallel_megatron_ddp.py:150 tests/test_norm_linear_megatron.py:100 tests/test_train_gpt.py:120 tests/test_profile_cli.py:200 &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
