R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
export CUDA_VISIBLE_DEVICES=0,1
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ag:16,8192,2560 ag:128,4096,4096 rs:16,7168,8192 --out $R/traces 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/trace.log | tail -60
echo "trace at ${SECONDS}s"
