# lane FILE:SECONDS ...: each GPU test file in turn (two ranks), bounded by its seconds and by the run's
# UNTIL (seconds since the run started), its log in $R/tests/ and a line in $R/summary.txt.
mkdir -p $R/tests
lane() {
  for spec in "$@"; do
    f=${spec%%:*}; s=${spec##*:}; n=$(basename $f .py)
    left=$((UNTIL - SECONDS)); (( s > left )) && s=$left
    (( s < 20 )) && { echo "$n: skipped (no time)" >> $R/summary.txt; continue; }
    t0=$SECONDS
    FLUXLITE_GPU_RANKS=2 timeout $s python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 $f > $R/tests/$n.log 2>&1
    echo "$n: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/$n.log)" >> $R/summary.txt
  done
}
