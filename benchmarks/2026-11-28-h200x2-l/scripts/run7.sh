R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The rule's sweep with the copies' new rates (pays_to_pad: PAD 2.0e12, CROP 1.4e12), one GPU; nine shapes drawn at
# random (random.Random(4949)) against f3c74f1 in the same call; the fused GPU tests of small and recurring calls.
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
(CUDA_VISIBLE_DEVICES=1 timeout 150 python3 benchmarks/2026-11-28-h200x2-j/scripts/sweep.py > $R/sweep.txt 2>&1; echo "sweep rc=$?" >> $R/sweep.txt) &
S="--shape ar:2157,8839,1401 --shape rs:4334,4135,11726 --shape ag:986,1326,12303 --shape rs:2634,11881,8459 --shape ag:12700,13669,11799 --shape rs:9432,2398,3179 --shape rs:15970,6174,4654 --shape ar:2009,6774,12361 --shape rs:14906,13498,10105"
wait
grep -v Warn $R/sweep.txt | tail -42
FLUXLITE_CACHE_DIR=$R/cache timeout 160 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 150 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A10 'op, M x K' | cut -c1-110
H=$PWD; cd /tmp && PYTHONPATH=$H/head:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout 160 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 150 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A10 'op, M x K' | cut -c1-110; cd $H
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "small_gemm_rs or recurring_eager or whole or pad" > $R/tests/fused.log 2>&1
echo "fused subset: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)"
true
