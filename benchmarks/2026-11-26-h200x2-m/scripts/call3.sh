#!/usr/bin/env bash
# Graph replay host time by node kind; auto at the old 16 and new 18 shapes with the timer declaring
# modes outside the timed part; bench_graphs.
R=/tmp/res13c; source benchmarks/2026-11-26-h200x2-m/scripts/common.sh
timeout 80 torchrun --standalone --nproc-per-node 2 $HERE/graph_nodes.py 2>&1 | grep -v "^W1\|Warning\|symm_mem" | tee $R/graph_nodes.log
source $HERE/auto_shapes.sh  # OLD, NEW
prof auto_new "$NEW"
prof auto_old "$OLD"
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs.json 2>&1 | grep -v '^W1' > $R/graphs.log; tail -8 $R/graphs.log | cut -c1-220
