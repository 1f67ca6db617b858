R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
export CUDA_VISIBLE_DEVICES=0,1
timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-c/scripts/cons.py 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/cons.log | tail -20
echo "cons at ${SECONDS}s"
