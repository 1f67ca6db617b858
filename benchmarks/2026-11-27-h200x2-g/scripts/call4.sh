#!/usr/bin/env bash
# Kineto traces of the MLP block's step, modes interleaved twice, with the GPUs' clocks and power.
R=/tmp/res26d; source .scratch/s26/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
REPEAT=2 timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s26/trace_layers.py $R --block mlp --modes sequential,megatron,fused 2>&1 | grep -v '^W1\|Warning\|warn' > $R/trace.log
echo "trace rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -v "^   " $R/trace.log | cut -c1-400
grep -A8 "^megatron 1\|^sequential 1\|^fused 1" $R/trace.log | grep "^   "
cat $R/dmon.log | awk 'NR<3 || NR%3==0' | head -40
gzip $R/*.json
