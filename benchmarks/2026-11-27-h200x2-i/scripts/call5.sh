#!/usr/bin/env bash
# One H100: the GEMM parts against whole GEMMs (cuBLAS); the Megatron DDP test (main_grad by addmm
# in place, two ranks sharing the GPU).
R=/tmp/res28e; source .scratch/s27/common.sh
timeout 120 python3 .scratch/s28/gsplit.py > $R/gsplit.log 2>&1; echo "gsplit rc=$? at ${SECONDS}s"; cat $R/gsplit.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron_ddp.py > $R/test_ddp.log 2>&1
echo "ddp rc=$? at ${SECONDS}s"; tail -3 $R/test_ddp.log
