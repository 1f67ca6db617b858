#!/usr/bin/env bash
# SM clock and power per mode while the MLP block steps back to back.
R=/tmp/res28d; source .scratch/s27/common.sh
timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s28/clk.py --block mlp 2>&1 | grep -v '^W1\|Warning\|warn' | tee $R/clk.log
nvidia-smi --query-gpu=power.limit,clocks.max.sm --format=csv | tee -a $R/clk.log
