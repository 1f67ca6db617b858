#!/usr/bin/env bash
# GPU tests of the matmul consumers (missing peer, replays, graphs, random shapes) and the cuBLASLt workspace experiment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15 PYTHONPATH=$PWD
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
git log -1 --format=%h > $R/commit.txt
timeout 40 python3 benchmarks/2026-11-26-h200x2-k/scripts/lt_ws.py 2>&1 | tee $R/lt_ws.log | tail -5
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "missing_peer or replayed_calls_timeout or recurring" 2>&1 | tail -4 | tee $R/t_fused.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py 2>&1 | tail -4 | tee $R/t_graphs.log
FLUXLITE_RANDOM_CASES=24 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py -k "fused_ops and 1" 2>&1 | tail -4 | tee $R/t_random.log
