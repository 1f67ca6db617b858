R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# auto (measured: --tune) at three calls with rows off 16 bytes, one where fused GEMM-AllReduce is slower than sequential.
git log --oneline -1 > $R/commit.txt 2>/dev/null
S="--shape ar:2009,6774,12361 --shape ar:4096,3001,2000 --shape rs:6000,5001,2999"
FLUXLITE_CACHE_DIR=$R/cache timeout 150 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused,auto --tune --rounds 5 --time-limit 140 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A4 'op, M x K'
true
