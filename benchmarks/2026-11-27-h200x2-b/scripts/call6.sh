#!/bin/bash
# call 6: AG one split where the chunk is one wave, else two; GEMM-RS two: plan splits, A/B, graphs, replays.
R=/tmp/r6; S=.scratch/s21
source $S/common.sh
export OLD=$PWD/$S/old R
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T plan_splits 60 torchrun --standalone --nproc-per-node 2 $S/plan_splits.py
bash $S/ab_profile.sh q --shape ag:4556,2048,768 --shape ag:4096,8192,2560 --shape ag:6000,3000,1500 --shape ag:3000,4096,2200 \
  --shape rs:4096,2048,8192 --shape rs:3072,2560,5000 | tee -a $R/tests.log
python3 $S/summarize_ab.py $R > $R/ab_summary.txt; cat $R/ab_summary.txt
(timeout 60 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_new.json 2>&1 \
    | grep -v '^W1\|Warning\|enable_symm' > $R/graphs_new.log); echo "graphs new rc=$? at ${SECONDS}s" | tee -a $R/tests.log
T graphs 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_gpu_graphs.py
