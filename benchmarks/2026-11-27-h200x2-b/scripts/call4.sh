#!/bin/bash
# call 4: peer access for ranks beyond the GPUs on two GPUs; split caps.
R=/tmp/r4; S=.scratch/s21
source $S/common.sh
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T w4_probe 60 torchrun --standalone --nproc-per-node 4 $S/w3_probe.py
T mixed_test 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "more_ranks_than_gpus"
T w4_ar 150 env FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"
T splits 200 env FLUXLITE_TIMEOUT_S=60 torchrun --standalone --nproc-per-node 2 $S/splits_graph.py
