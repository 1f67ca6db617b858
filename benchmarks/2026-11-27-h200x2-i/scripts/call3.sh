#!/usr/bin/env bash
# cuBLAS: the MLP block's GEMMs whole against the parts the fused paths run; the GPU safety tests
# the previous run's time limit cut off; the profiler's GPU tests.
R=/tmp/res28c; source .scratch/s27/common.sh
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 .scratch/s28/gsplit.py > $R/gsplit.log 2>&1; echo "gsplit rc=$? at ${SECONDS}s"; cat $R/gsplit.log
timeout 320 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_safety.py -k "backward_replayed or recovery or different_calls" > $R/test_gpu_safety.log 2>&1
echo "safety rc=$? at ${SECONDS}s"; tail -3 $R/test_gpu_safety.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_profile_cli.py > $R/test_profile_cli.log 2>&1
echo "profile_cli rc=$? at ${SECONDS}s"; tail -3 $R/test_profile_cli.log
