#!/usr/bin/env bash
# A/B of the Column backward's weight grad in parts beside the copy-engine gather (new) against NCCL's
# all-gather beside the input grad's GEMM-RS (old): MLP block three times each, alternating; once
# each with CUDA_DEVICE_MAX_CONNECTIONS=1; the GPTModel step once more each.
R=/tmp/res27d; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s27/old:$PYTHONPATH
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto"
for n in new1 old1 new2 old2 new3 old3 cdmc1_new cdmc1_old; do
  P=$PYTHONPATH; [[ $n == *old* ]] && P=$OLD; C=; [[ $n == cdmc1* ]] && C=CUDA_DEVICE_MAX_CONNECTIONS=1
  env $C PYTHONPATH=$P timeout 120 $L --out $R/mlp_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp_$n.log
  echo "mlp $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/mlp_$n.log | tail -3
done
for n in old new; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD
  PYTHONPATH=$P timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt_$n.log
  echo "gpt $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/gpt_$n.log
done
