R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
for t in 8 64; do
timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/decode_ctx.py $t 2>&1 \
  | grep -v "^W1\|FutureWarning\|enable_symm\|warn" | tee -a $R/decode_ctx.log | tail -40
echo "t=$t at ${SECONDS}s"
done
