R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt
timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h100x1-h200/scripts/gelu_why.py 2>&1 | grep -v "^W1\|Warning\|warn\|return func\|enable_symm" | tee $R/gelu_why.log | tail -60
echo "at ${SECONDS}s"
