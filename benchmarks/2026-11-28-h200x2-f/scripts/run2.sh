R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
S="--shape ar:200,4104,3629 --shape ar:4125,5143,2163 --shape ar:7,5000,2000 --shape ag:98,6932,5589 --shape rs:650,5488,6282 --shape ar:180,2514,7118 --shape ag:436,1135,5255 --shape rs:40,1864,4842"
FLUXLITE_CACHE_DIR=$R/cache_new timeout 330 python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --time-limit 310 --no-progress --out $R/prof_new > $R/prof_new.log 2>&1
echo "prof new rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_new.log | grep -A12 'op, M x K' | head -11
