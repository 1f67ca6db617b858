#!/usr/bin/env bash
R=/tmp/res16d; source .scratch/s16/common.sh
timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s16/ag_auto.py > $R/ag_auto.log 2>&1; grep -v "^W1\|Warning\|enable_symm" $R/ag_auto.log | tail -20
timeout 170 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 5 --out $R/graphs.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/graphs.log; tail -14 $R/graphs.log
