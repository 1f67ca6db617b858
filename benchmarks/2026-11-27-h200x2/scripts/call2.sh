#!/usr/bin/env bash
# Matmul-consumer counts as events: GPU tests, timelines, RS/AR profile and replays against the old tree.
R=/tmp/res20b; source $(dirname $0)/common.sh
OLD=$PWD/old  # the tree of 8fb26a1 (git archive 8fb26a1 fluxlite scripts)
: > $R/gpu_tests.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "anchor or recurring_gemm_rs or recurring_eager or rs_matmul or timeout_is_raised" 2>&1 | tail -3 | tee -a $R/gpu_tests.log
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -2 | tee -a $R/gpu_tests.log
echo "tests at ${SECONDS}s"
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes rs:8192,4096,8192 ar:2048,14336,8192 \
  2>&1 | grep -v '^W1\|Warning\|enable_symm\|_warn_once' > $R/trace_new.log; echo "trace new rc=$? at ${SECONDS}s"
S="--shape rs:8192,4096,8192 --shape rs:2048,14336,8192 --shape rs:4096,5000,7000 --shape rs:16384,3584,8192 --shape ar:2048,14336,8192 --shape ar:8192,4096,8192 --shape ar:4096,5000,7000"
R=$R OLD=$OLD bash $(dirname $0)/ab_profile.sh p $S
for v in old new; do
  if [ $v = old ]; then D=$OLD; else D=$PWD; fi
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_$v.json 2>&1 \
    | grep -v '^W1\|Warning\|enable_symm' > $R/graphs_$v.log); echo "graphs $v rc=$? at ${SECONDS}s"
done
python3 $(dirname $0)/summarize_ab.py $R
for v in old new; do echo "== graphs $v"; grep "host us" $R/graphs_$v.log; done
grep -A14 "^== RS 8192x4096->8192 rank 0\|^== AR 2048x14336->8192 rank 0" $R/trace_new.log
