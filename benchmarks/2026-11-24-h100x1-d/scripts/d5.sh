#!/usr/bin/env bash
# user-graph host per call (issue 11), old vs new, then the rest of the GPU tests on the new tree
T=240 bash .scratch/s11/ab.sh 1 graphs scripts/bench_graphs.py --rounds 3
T=200 bash .scratch/s11/d4.sh tests/test_gpu_epilogue.py tests/test_parallel_gpu.py 2>&1 | tail -20
