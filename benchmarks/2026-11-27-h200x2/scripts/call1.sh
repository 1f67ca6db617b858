#!/usr/bin/env bash
# The trace script's first GPU run; GEMM-AllReduce with its post-join steps on the caller's stream, against the old tree.
R=/tmp/res20a; source $(dirname $0)/common.sh
OLD=$PWD/old  # the tree of 8fb26a1 (git archive 8fb26a1 fluxlite scripts)
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes 8192,4096,8192 ar:2048,14336,8192 \
  --out $R/traces 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/trace_new.log; echo "trace new rc=$? at ${SECONDS}s"
(cd $OLD && PYTHONPATH=$OLD:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py \
  --shapes ar:8192,4096,8192 ar:2048,14336,8192 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/trace_old.log); echo "trace old rc=$? at ${SECONDS}s"
rm -rf $R/traces/*.json.gz 2>/dev/null; du -sh $R/traces
AR="--shape ar:2048,14336,8192 --shape ar:3000,13824,5120 --shape ar:8192,4096,8192 --shape ar:4096,5000,7000 --shape ar:2560,9000,6000 --shape ar:16384,3584,8192"
R=$R OLD=$OLD bash $(dirname $0)/ab_profile.sh ar $AR  # the profiles of this call are named ar_old-*, ar_new-*
python3 $(dirname $0)/summarize_ab.py $R
: > $R/gpu_tests.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee -a $R/gpu_tests.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_safety.py -k gemm_ar 2>&1 | tail -3 | tee -a $R/gpu_tests.log
echo "tests done at ${SECONDS}s"
grep -v "^\[" $R/trace_new.log | head -80; grep -v "^\[" $R/trace_old.log | head -40
