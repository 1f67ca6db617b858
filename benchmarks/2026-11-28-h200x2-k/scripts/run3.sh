R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran with the padding at K whole only (the code of rsk, see run4.sh), before the K-off calls were padded too.
# old: git archive b4c793c fluxlite | tar -x -C old
# GEMM-RS fused on whole output rows at six GEMM-RS shapes drawn at random (four with K whole: padded; two with
# K off too: the rule's sequential), against b4c793c (old, from /tmp); AG-GEMM at N off 8 against N whole;
# the Triton core alone at those N (one GPU).
git log --oneline -1 > $R/commit.txt 2>/dev/null
CUDA_VISIBLE_DEVICES=0 timeout 90 python3 scripts/bench_gemm.py --shapes 12000,4096,6001 12000,4096,6008 8192,5000,3500 8192,5000,3504 16384,8192,3501 16384,8192,3504 > $R/core.txt 2>&1
echo "core rc=$? at ${SECONDS}s"; cat $R/core.txt | tail -40
S="--shape rs:11998,8688,3473 --shape rs:7540,11472,3173 --shape rs:10900,9104,8589 --shape rs:14338,12720,2986 --shape rs:14634,11037,1804 --shape rs:3058,11095,7298"
FLUXLITE_CACHE_DIR=$R/cache timeout $((330 - SECONDS)) python3 -m fluxlite.profile $S --shape ag:12000,4096,6008 --shape ag:8192,5000,3504 --nproc 2 --impls fused,auto --rounds 5 --tune --time-limit $((320 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A10 'op, M x K' | head -11
H=$PWD; cd /tmp && PYTHONPATH=$H/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((420 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((410 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A8 'op, M x K' | head -9
true
