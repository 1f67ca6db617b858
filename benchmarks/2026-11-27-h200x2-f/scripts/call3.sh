#!/usr/bin/env bash
# The split GEMMs with the whole GEMM's algorithm (FACTOR=4) against the heuristic on the split, alternating.
R=/tmp/res25c; source .scratch/s25/common.sh
SH="rs:10240,4080,7016 rs:8192,4968,7832 rs:6144,4784,9160 rs:6144,9136,10560 rs:8192,11832,7184 rs:10240,10736,4464 rs:12288,5000,6000 rs:10240,7000,9000 rs:14336,6000,5000 rs:16384,3072,4096 rs:8192,7168,4096 rs:8192,6144,12288"
python3 .scratch/s25/tiles.py $SH 2>&1 | tee $R/tiles.txt
i=0
for v in even whole even whole; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s25/bo_algo.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep "cublasLtMatmul calls" $R/$n.log | head -2
done
python3 .scratch/s25/summ.py /tmp/res25c
