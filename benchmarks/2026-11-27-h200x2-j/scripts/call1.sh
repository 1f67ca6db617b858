#!/usr/bin/env bash
# One GPU: the Triton GEMM core against cuBLAS at the current code (bench_gemm shapes, random off-128 shapes, extra configs).
R=/tmp/res29a; source .scratch/s29/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee $R/smi.txt
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 & DM=$!
timeout 400 python3 .scratch/s29/gemm29.py $R/gemm29.json 2>&1 | grep -v Warning | tee $R/gemm29.log; echo "gemm29 rc=${PIPESTATUS[0]} at ${SECONDS}s"
kill $DM 2>/dev/null; true
