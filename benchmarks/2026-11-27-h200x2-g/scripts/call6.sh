#!/usr/bin/env bash
# GPU tests under CUDA_DEVICE_MAX_CONNECTIONS=1: random shapes (12 cases per draw) and the fused
# tests that stress the producer's ordering (back-to-back calls, pull beside push, replays).
R=/tmp/res26f; source .scratch/s26/common.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1 FLUXLITE_RANDOM_CASES=12
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_random.py > $R/test_gpu_random.log 2>&1
echo "random rc=$? at ${SECONDS}s"; tail -9 $R/test_gpu_random.log
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_fused.py \
  -k "thousand or pull_calls or recurring or anchor" > $R/test_gpu_fused.log 2>&1
echo "fused rc=$? at ${SECONDS}s"; tail -9 $R/test_gpu_fused.log
