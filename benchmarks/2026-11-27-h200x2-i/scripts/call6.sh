#!/usr/bin/env bash
# One H100, two ranks sharing it: the Megatron DDP test (main_grad by addmm in place).
R=/tmp/res28f; source .scratch/s27/common.sh
FLUXLITE_GPU_SHARE=1 timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron_ddp.py > $R/test_ddp.log 2>&1
