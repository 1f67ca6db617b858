R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
for c in "256 sp" "1 replicated" "8 replicated" "64 replicated"; do
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/decode_ctx.py $c 2>&1 \
  | grep -v "^W1\|FutureWarning\|enable_symm\|warn" | tee -a $R/decode_ctx.log | grep -v "^\[rank"
echo "$c at ${SECONDS}s"
done
