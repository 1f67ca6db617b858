#!/usr/bin/env bash
# The limit with the GEMM enqueued before the copies (fluxlite/profile/limit.py), with and without
# CUDA_DEVICE_MAX_CONNECTIONS=1.
R=/tmp/res26g; source .scratch/s26/common.sh
SH="rs:8192,4096,8192 rs:10240,4080,7016 ag:8192,8192,14336"
for c in 1 default; do
  if [ $c = 1 ]; then export CUDA_DEVICE_MAX_CONNECTIONS=1; else unset CUDA_DEVICE_MAX_CONNECTIONS; fi
  timeout 80 torchrun --standalone --nproc-per-node 2 scripts/bench_overlap.py --rounds 5 --out $R/bo_cdmc_$c.json \
    --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bo_cdmc_$c.log
  echo "cdmc=$c rc=${PIPESTATUS[0]} at ${SECONDS}s"
  grep -o "^[ar][sg] [0-9x>-]*: cublas.*torch=[0-9.]*" $R/bo_cdmc_$c.log | sed 's/ratios to cublas: //; s/core=[0-9.]* //; s/copy [0-9.]* ms, nccl [0-9.]* ms, //'
done
