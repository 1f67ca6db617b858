#!/usr/bin/env bash
R=/tmp/res16i; source .scratch/s16/common.sh
for code in old new; do
  case $code in old) P=$PWD/.scratch/old;; *) P=$PWD;; esac
  echo "## $code"; PYTHONPATH=$P timeout 80 torchrun --standalone --nproc-per-node 2 .scratch/s16/warm_parity.py 2>&1 | grep "^rank" | tee $R/warm_parity_$code.log
done
