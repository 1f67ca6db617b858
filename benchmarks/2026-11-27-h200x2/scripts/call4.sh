#!/usr/bin/env bash
# The gather end at four programs per SM: timelines, profile against the old tree, GPU tests, GPTModel without SP.
R=/tmp/res20d; source $(dirname $0)/common.sh
OLD=$PWD/old  # the tree of 8fb26a1 (git archive 8fb26a1 fluxlite scripts)
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ar:8192,4096,8192 ar:2048,14336,8192 \
  2>&1 | grep -v '^W1\|Warning\|enable_symm\|_warn_once' > $R/trace_new.log; echo "trace new rc=$? at ${SECONDS}s"
S="--shape ar:2048,14336,8192 --shape ar:3000,13824,5120 --shape ar:8192,4096,8192 --shape ar:4096,5000,7000 --shape ar:2560,9000,6000 --shape ar:16384,3584,8192 --shape ar:1536,8192,8192 --shape ar:2048,8192,7168"
R=$R OLD=$OLD bash $(dirname $0)/ab_profile.sh p $S
python3 $(dirname $0)/summarize_ab.py $R
grep -A18 "^== AR .* rank 0" $R/trace_new.log | grep "==\|us per\|gather\|nvjet" | head -20
: > $R/gpu_tests.log
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -2 | tee -a $R/gpu_tests.log
echo "tests at ${SECONDS}s"
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/bench_gpt-nosp.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt-nosp.log; echo "gpt-nosp rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt-nosp.log
