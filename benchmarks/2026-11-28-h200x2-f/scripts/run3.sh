R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
export FLUXLITE_CACHE_DIR=$R/cache
for a in "98,6932,5589 ag" "7,5000,2000 ar" "40,1864,4842 rs"; do
timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-f/scripts/autohost.py $a > $R/autohost_${a// /_}.log 2>&1; echo "autohost $a rc=$? at ${SECONDS}s"; grep -v "^W1\|arn" $R/autohost_${a// /_}.log | tail -7 | cut -c1-1500
done
