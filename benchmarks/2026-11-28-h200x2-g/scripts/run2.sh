R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The GPU test files that the first call's four lanes left unfinished or that time calls, alone or in fewer lanes.
mkdir -p $R/tests
lane() {
  for spec in "$@"; do
    f=${spec%%:*}; s=${spec##*:}; n=$(basename $f .py)
    left=$((570 - SECONDS)); (( s > left )) && s=$left
    (( s < 20 )) && { echo "$n: skipped (no time)" >> $R/summary.txt; continue; }
    t0=$SECONDS
    FLUXLITE_GPU_RANKS=2 timeout $s python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 $f > $R/tests/$n.log 2>&1
    echo "$n: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/$n.log)" >> $R/summary.txt
  done
}
lane tests/test_profile_cli.py:200   # alone: it compares timings
lane tests/test_gpu_random.py:400 &
lane tests/test_gpu_epilogue.py:200 tests/test_parallel_gpu.py:200 &
( t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout $((560 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_world_sizes.py \
    -k "at_every_gpu and (fused_shapes or gemm_ar or missing_peer)" > $R/tests/shared4.log 2>&1
  echo "shared W=4: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
