R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The crop in the gather's end (A, this tree) against the crop after it (B), alternating A B A B at three shapes
# (9 rounds each); then the random GPU suite.
mkdir -p $R/tests
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py > $R/tests/gemm_ar.log 2>&1
echo "gemm_ar: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/gemm_ar.log)" | tee -a $R/summary.txt
S="--shape ar:14174,2128,2660 --shape ar:14067,2248,6862 --shape ar:2009,6774,12361"
H=$PWD
for i in 1 2; do
  FLUXLITE_CACHE_DIR=$R/cache timeout 100 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 9 --time-limit 90 --no-progress --out $R/profA$i > $R/profA$i.log 2>&1
  echo "A$i rc=$? at ${SECONDS}s"; grep -v '^W1' $R/profA$i.log | grep -A4 'op, M x K' | cut -c1-120
  cd /tmp && PYTHONPATH=$H/.scratch/s50/b:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_b timeout 100 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 9 --time-limit 90 --no-progress --out $R/profB$i > $R/profB$i.log 2>&1
  echo "B$i rc=$? at ${SECONDS}s"; grep -v '^W1' $R/profB$i.log | grep -A4 'op, M x K' | cut -c1-120; cd $H
done
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout $((560 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py > $R/tests/random.log 2>&1
echo "random: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/random.log)" | tee -a $R/summary.txt
true
