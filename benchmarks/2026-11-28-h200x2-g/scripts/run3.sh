R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 300 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/decode_graph.py ag:8,8192,28672 rs:8,14336,8192 ag:8,8192,5120 rs:8,4096,8192 \
  ag:64,8192,28672 rs:64,14336,8192 ar:1,14336,8192 ar:8,14336,8192 ar:64,14336,8192 ag:8,4096,14336 rs:8,7168,4096 2>&1 \
  | grep -v "^W1\|FutureWarning\|enable_symm" | tee $R/decode_graph.log
echo "done at ${SECONDS}s"
