#!/usr/bin/env bash
# Interleaved A/B of memop and copy flag writes; GPU fused-call tests of replays and recurring calls.
R=/tmp/res14c; source benchmarks/2026-11-26-h200x2-n/scripts/common.sh
timeout 240 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-n/scripts/signal_ab.py 2>&1 | grep -v '^W1' > $R/signal_ab.log; tail -14 $R/signal_ab.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "recurring or replay or missing or growth" 2>&1 | tail -2 | tee -a $R/gpu_tests.log
