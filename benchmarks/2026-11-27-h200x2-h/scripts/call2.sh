#!/usr/bin/env bash
# Kineto traces of the MLP block's step, fluxlite fused with the copy-engine gather (this tree) and
# with NCCL's (old), and Megatron's layers.
R=/tmp/res27b; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s27/old:$PYTHONPATH
for n in new old; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD; mkdir -p $R/$n
  PYTHONPATH=$P REPEAT=2 timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s27/trace_layers.py $R/$n --block mlp --modes megatron,fused 2>&1 | grep -v '^W1\|Warning\|warn' > $R/$n/trace.log
  echo "trace $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep "^megatron\|^fused" $R/$n/trace.log
done
gzip $R/*/*.json
