#!/usr/bin/env bash
# The whole Llama-70B block (attention too), this tree, twice, and once with one hardware queue.
R=/tmp/res28g; source .scratch/s27/common.sh
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,fused,auto"
for n in run1 run2 cdmc1; do
  C=; [[ $n == cdmc1 ]] && C=CUDA_DEVICE_MAX_CONNECTIONS=1
  env $C timeout 70 $L --out $R/block_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/block_$n.log
  echo "block $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep speedup $R/block_$n.log
done
