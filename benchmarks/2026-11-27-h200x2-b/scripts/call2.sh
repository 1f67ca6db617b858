#!/bin/bash
# call 2: split caps vs graph launch host time and device time; W=3/4 GEMM-AllReduce on shared GPUs.
R=/tmp/r2; S=.scratch/s21
source $S/common.sh
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T splits 240 torchrun --standalone --nproc-per-node 2 $S/splits_graph.py
T w3_ar 200 env FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=3 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"
T w4_ar 200 env FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"
