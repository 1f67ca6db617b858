#!/usr/bin/env bash
# GEMM-AllReduce's two shots, where their time goes: kineto timelines of back-to-back fused calls at both ranks.
R=/tmp/res19f; source .scratch/s19/common.sh
OUT=$R timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s19/ar_trace.py "8192,4096,8192 2048,14336,8192" 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/ar_trace.log; echo "trace rc=$? at ${SECONDS}s"
rm -f $R/ar_*_r*.json
grep -v "^\[" $R/ar_trace.log | head -150
