R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
t() { local lim=$1 f=$2; shift 2; FLUXLITE_GPU_SHARE=1 timeout $lim python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/$f.py "$@" > $R/t/$f.log 2>&1; echo "$f rc=$? at ${SECONDS}s" >> $R/t/rc.log; }
( t 500 test_gpu_fused -k "small or missing or recurring"; FLUXLITE_GPU_RANKS=4 t $((520 - SECONDS)) test_world_sizes -k "small_chunks or small_rs" ) &
( t 250 test_gpu_graphs; t $((520 - SECONDS)) test_gpu_safety ) &
wait
cat $R/t/rc.log; for f in $R/t/test*.log; do echo "== $f"; tail -6 $f; done
