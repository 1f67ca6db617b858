#!/usr/bin/env bash
# The inference stack in both decode layouts on this code; GEMM-AllReduce's two shots with 2, 3 and 4 matmul splits.
R=/tmp/res19b; source .scratch/s19/common.sh
for layout in sp replicated; do
  timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout $layout \
    --out $R/bench_inference_$layout.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_$layout.log
  echo "inference $layout rc=$? at ${SECONDS}s"; tail -16 $R/bench_inference_$layout.log
done
AR="--shape ar:8192,4096,8192 --shape ar:4096,8192,8192 --shape ar:16384,3584,8192 --shape ar:2048,14336,8192 --shape ar:3000,13824,5120 --shape ar:6144,6144,6144"
for s in 2 3 4 2; do
  SPLITS=$s timeout 110 python3 .scratch/s19/splits_profile.py $AR --nproc 2 --impls sequential,fused --rounds 7 --time-limit 95 \
    --no-progress --out $R/ar_splits$s-$SECONDS 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_splits$s.log; echo "splits $s rc=$? at ${SECONDS}s"
done
python3 .scratch/s19/summarize_splits.py $R
