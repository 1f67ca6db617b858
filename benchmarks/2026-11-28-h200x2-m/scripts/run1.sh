R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# GEMM-AllReduce on whole output rows (N off 8): GPU tests, then the profiler at eight shapes against 1c8afed in the same call.
mkdir -p $R/tests
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py tests/test_gpu_gemm_ar.py > $R/tests/whole_ar.log 2>&1
echo "whole rows + gemm_ar: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole_ar.log)" | tee -a $R/summary.txt
S="--shape ar:2009,6774,12361 --shape ar:2157,8839,1401 --shape ar:14174,2128,2660 --shape ar:5364,9490,11974 --shape ar:7937,6899,11754 --shape ar:12945,11437,5663 --shape ar:14067,2248,6862 --shape ar:7439,12473,5827"
FLUXLITE_CACHE_DIR=$R/cache timeout 170 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 160 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A10 'op, M x K' | cut -c1-120
H=$PWD; cd /tmp && PYTHONPATH=$H/.scratch/s50/head:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout 170 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 160 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A10 'op, M x K' | cut -c1-120; cd $H
true
