#!/usr/bin/env bash
# What a repeated auto call does on the host that the forced call of its choice does not (cProfile diff).
R=/tmp/res18d; source .scratch/s18/common.sh
for s in ag:8,8192,3584 rs:1024,4096,8192; do
  BACKEND=nccl IMPL=fused timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s18/prof_diff.py $s 2>&1 | grep -v '^W1\|Warning\|enable_symm' | tee $R/prof_${s//[:,]/_}.log
done
