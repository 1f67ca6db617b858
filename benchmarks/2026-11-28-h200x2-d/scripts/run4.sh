R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
t() { CUDA_VISIBLE_DEVICES=$1 FLUXLITE_GPU_SHARE=$4 timeout $2 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/$3.py > $R/t/$3.log 2>&1; echo "$3 rc=$? at ${SECONDS}s" >> $R/t/rc.log; }
( t 2 330 test_gpu_fused 1 ) &
( t 3 330 test_gpu_random 1 ) &
( FLUXLITE_GPU_RANKS=2 t 0,1 330 test_parallel_gpu 0 ) &
wait
cat $R/t/rc.log; for f in $R/t/*.log; do echo "== $f"; tail -6 $f; done
