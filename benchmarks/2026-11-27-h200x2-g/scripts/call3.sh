#!/usr/bin/env bash
# Kineto traces of the MLP block's step: Megatron's layers, fluxlite fused and sequential.
R=/tmp/res26c; source .scratch/s26/common.sh
timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s26/trace_layers.py $R --block mlp --modes megatron,fused,sequential 2>&1 | grep -v '^W1\|Warning\|warn' > $R/trace.log
echo "trace rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/trace.log | tail -100
gzip $R/*.json
