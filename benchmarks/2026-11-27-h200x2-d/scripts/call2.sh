#!/usr/bin/env bash
# Split GEMMs on one GPU; the breakdown's kernel case rebuilt; GPU tests of this code; empty GEMMs on CUDA.
R=/tmp/res23b; source .scratch/s23/common.sh
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 .scratch/s23/splitgemm.py $R/splitgemm.json 2>&1 | tee $R/splitgemm.log | grep -v Warn
echo "splitgemm at ${SECONDS}s"
timeout 60 torchrun --standalone --nproc-per-node 2 .scratch/s23/empty_gpu.py 2>&1 | grep -v '^W1\|Warning' | tail -4 | tee $R/empty.log
echo "empty at ${SECONDS}s"
timeout 90 torchrun --standalone --nproc-per-node 2 scripts/bench_overlap.py --rounds 5 --out $R/bo_kernel.json \
  --shapes rs:8192,7168,4096 rs:4096,6144,12288 ag:8192,8192,14336 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bo_kernel.log
grep '^rs\|^ag' $R/bo_kernel.log | cut -c1-420; echo "bo at ${SECONDS}s"
: > $R/gpu_tests.log
for f in ${TESTS:-tests/test_gpu_fused.py}; do
  timeout ${TB:-170} python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -5 | tee -a $R/gpu_tests.log
  echo "$f at ${SECONDS}s" | tee -a $R/gpu_tests.log
done
