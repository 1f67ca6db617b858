#!/usr/bin/env bash
# GEMM-RS matmul consumer: peer-chunk GEMMs storing into the peers' recv (remote.py) against the
# committed copy-engine producer, alternating, splits 2 (as committed) and 1.
R=/tmp/res26a; source .scratch/s26/common.sh
SH="rs:10240,4080,7016 rs:8192,4968,7832 rs:6144,4784,9160 rs:6144,9136,10560 rs:8192,11832,7184 rs:10240,10736,4464 rs:16384,3072,4096 rs:8192,4096,8192 rs:4096,14784,8192 rs:8192,14336,8192"
i=0
for v in base remote remote1 base remote; do
  i=$((i+1)); n=bo${i}_$v
  S=""; [ $v = remote1 ] && S=1
  VARIANT=${v%1} REMOTE_SPLITS=$S timeout 110 torchrun --standalone --nproc-per-node 2 .scratch/s26/bo_remote.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -3 $R/$n.log
done
python3 .scratch/s26/summ.py $R | tee $R/summary.txt
