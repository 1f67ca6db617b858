R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
export FLUXLITE_CACHE_DIR=$R/cache
for a in "106,2735,8562 rs" "98,6932,5589 ag"; do
timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-f/scripts/autoeager.py $a > $R/autoeager_${a// /_}.log 2>&1; echo "autoeager $a rc=$? at ${SECONDS}s"; grep -v "^W1\|arn" $R/autoeager_${a// /_}.log | tail -32 | cut -c1-300
done
