#!/usr/bin/env bash
# Flag writes to peers as copies of the SET word: census and bench_graphs, base (HEAD) then head, one machine; GPU graph/replay tests.
R=/tmp/res14b; source benchmarks/2026-11-26-h200x2-n/scripts/common.sh
timeout 120 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-n/scripts/graph_census.py 2>&1 | grep -v '^W1' > $R/census_head.log; tail -8 $R/census_head.log
(cd .scratch/base14 && PYTHONPATH=$PWD timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_base.json 2>&1 | grep -v '^W1' > $R/graphs_base.log); tail -8 $R/graphs_base.log
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_head.json 2>&1 | grep -v '^W1' > $R/graphs_head.log; tail -8 $R/graphs_head.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py 2>&1 | tail -2 | tee -a $R/gpu_tests.log
