R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The final code (598f685): GPU tests of the copies and the padded calls, the rule's sweep, auto at small calls off
# 16 bytes, then the random GPU suite.
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
(CUDA_VISIBLE_DEVICES=1 timeout 150 python3 benchmarks/2026-11-28-h200x2-j/scripts/sweep.py > $R/sweep.txt 2>&1; echo "sweep rc=$?" >> $R/sweep.txt) &
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_repitch.py > $R/tests/repitch.log 2>&1
echo "repitch tests: rc=$? :: $(tail -1 $R/tests/repitch.log)" >> $R/summary.txt
wait; grep -v Warn $R/sweep.txt | tail -42
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py tests/test_gpu_gemm_ar.py > $R/tests/whole_ar.log 2>&1
echo "whole rows + gemm_ar: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole_ar.log)" >> $R/summary.txt; cat $R/summary.txt
S="--shape ag:1024,3001,2000 --shape rs:1024,5001,3001 --shape ar:512,3001,2000 --shape rs:2048,4099,2001"
FLUXLITE_CACHE_DIR=$R/cache timeout 100 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused,auto --rounds 5 --time-limit 90 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A5 'op, M x K'
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py > $R/tests/random.log 2>&1
echo "random: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/random.log)" | tee -a $R/summary.txt
true
