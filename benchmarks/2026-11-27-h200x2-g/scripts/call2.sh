#!/usr/bin/env bash
# The MLP half of the Llama-70B block alone against Megatron's layers (bench_layers --block mlp), the
# whole block, and the GPTModel step.
R=/tmp/res26b; source .scratch/s26/common.sh
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py"
for n in mlp1 block mlp2; do
  B=mlp; M=megatron,fused,auto,sequential; [ $n = block ] && B=transformer && M=megatron,fused,auto
  timeout 150 $L --block $B --modes $M --out $R/layers_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/layers_$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -4 $R/layers_$n.log
done
timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt.log
echo "gpt rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -8 $R/gpt.log
