R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# GEMM-AllReduce on whole output rows, the crop in the gather's end kernel (A) against the crop after it (B: the
# same tree without GemmAllReduce.wide_output) and 1c8afed (rows as given), one call; then the GPU tests.
mkdir -p $R/tests
S="--shape ar:2009,6774,12361 --shape ar:2157,8839,1401 --shape ar:14174,2128,2660 --shape ar:5364,9490,11974 --shape ar:7937,6899,11754 --shape ar:12945,11437,5663 --shape ar:14067,2248,6862 --shape ar:7439,12473,5827 --shape ar:8192,8192,8192"
FLUXLITE_CACHE_DIR=$R/cache timeout 150 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 140 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof A rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A11 'op, M x K' | cut -c1-120
H=$PWD; cd /tmp && PYTHONPATH=$H/.scratch/s50/b:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_b timeout 150 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 140 --no-progress --out $R/prof_b > $R/prof_b.log 2>&1
echo "prof B rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_b.log | grep -A11 'op, M x K' | cut -c1-120; cd $H
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py tests/test_gpu_gemm_ar.py tests/test_kernels.py > $R/tests/whole_ar.log 2>&1
echo "whole rows + gemm_ar + kernels: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole_ar.log)" | tee -a $R/summary.txt
true
