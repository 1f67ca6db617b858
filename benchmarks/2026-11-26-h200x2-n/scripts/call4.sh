#!/usr/bin/env bash
# The kept rule (a peer's flag after a copy, with no flag operation after it, is a copy of the SET word): A/B of user graphs,
# bench_graphs, the random-shape GPU tests.
R=/tmp/res14d; source benchmarks/2026-11-26-h200x2-n/scripts/common.sh
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-n/scripts/signal_ab.py 2>&1 | grep -v '^W1' > $R/signal_ab.log; grep -v Warn $R/signal_ab.log | tail -13
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_head.json 2>&1 | grep -v '^W1' > $R/graphs_head.log; tail -8 $R/graphs_head.log
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_gpu_random.py 2>&1 | tail -6 | tee -a $R/gpu_tests.log
