R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
t() { CUDA_VISIBLE_DEVICES=$1 FLUXLITE_GPU_SHARE=1 timeout $2 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/$3.py > $R/t/$3.log 2>&1; echo "$3 rc=$? at ${SECONDS}s" >> $R/t/rc.log; }
timeout 150 torchrun --standalone --nproc-per-node 4 benchmarks/2026-11-28-h200x4-b/scripts/diag.py 2>&1 | grep -v '^W1\|Warning\|warn\|enable_symm' > $R/diag4.log
echo "diag4 rc=$? at ${SECONDS}s"; cat $R/diag4.log
( t 2 330 test_gpu_fused ) &
( t 3 330 test_gpu_random ) &
export CUDA_VISIBLE_DEVICES=0,1
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x4-b/scripts/diag.py 2>&1 | grep -v '^W1\|Warning\|warn\|enable_symm' > $R/diag2.log
echo "diag2 rc=$? at ${SECONDS}s"; cat $R/diag2.log
wait
cat $R/t/rc.log; for f in $R/t/*.log; do echo "== $f"; tail -4 $f; done
