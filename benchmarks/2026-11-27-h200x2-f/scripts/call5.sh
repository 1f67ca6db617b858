#!/usr/bin/env bash
# Sixteen shapes drawn at random (seed 20261127: AG and GEMM-RS, 32-16384 rows, K and N any size):
# every implementation and auto's choice, both modes.
R=/tmp/res25e; source .scratch/s25/common.sh
SH="--shape ag:10216,10912,6696 --shape rs:280,9656,14256 --shape ag:12000,2894,11451 --shape rs:128,2560,4768 --shape ag:14040,13760,9544 --shape rs:6144,12933,4259 --shape ag:384,3400,13032 --shape rs:4096,12183,6048 --shape ag:2336,10431,13448 --shape rs:4232,3623,13349 --shape ag:48,12800,3277 --shape rs:5328,6510,4399 --shape ag:128,6936,8872 --shape rs:12000,13296,9207 --shape ag:16384,9194,13616 --shape rs:32,10560,10329"
timeout 400 python3 -m fluxlite.profile $SH --nproc 2 --impls sequential,decomposed,fused,torch_symm_mem,auto --tune \
  --rounds 5 --time-limit 330 --no-progress --out $R/prof 2>&1 | grep -v '^W1\|Warning\|enable_symm' | tee $R/profile.log | tail -60
echo "done at ${SECONDS}s"
