R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at the landed code (0867fa5).
# rsk: a copy of fluxlite/ with scripts/rs_k_whole_only.patch applied (the padding at K whole only, the rule sending K-off calls to sequential)
# GEMM-RS fused on whole output rows with K off 8 too (a and the weight padded in K as before, the weight and output
# in N as well), against the K-whole-only padding (rsk, from /tmp) at five shapes with K and N off 8.
git log --oneline -1 > $R/commit.txt 2>/dev/null
S="--shape rs:14634,11037,1804 --shape rs:3058,11095,7298 --shape rs:15646,13227,6639 --shape rs:8192,4099,3001 --shape rs:6000,5001,2999"
FLUXLITE_CACHE_DIR=$R/cache timeout 200 python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --tune --time-limit 190 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A6 'op, M x K' | head -7
H=$PWD; cd /tmp && PYTHONPATH=$H/rsk:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((300 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((290 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A6 'op, M x K' | head -7
true
