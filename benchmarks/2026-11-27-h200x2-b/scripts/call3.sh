#!/bin/bash
# call 3: W=3/4 in shared mode (one GPU; two GPUs) probe; split caps again.
R=/tmp/r3; S=.scratch/s21
source $S/common.sh
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T w3_onegpu 90 env CUDA_VISIBLE_DEVICES=0 torchrun --standalone --nproc-per-node 3 $S/w3_probe.py
T w3_twogpu 90 env CUDA_LAUNCH_BLOCKING=1 torchrun --standalone --nproc-per-node 3 $S/w3_probe.py
T w4_twogpu 90 torchrun --standalone --nproc-per-node 4 $S/w3_probe.py
T splits 240 env FLUXLITE_TIMEOUT_S=60 torchrun --standalone --nproc-per-node 2 $S/splits_graph.py
