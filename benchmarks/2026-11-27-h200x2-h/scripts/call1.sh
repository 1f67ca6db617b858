#!/usr/bin/env bash
# The Column backward's input gathered by the copy engines (this tree) against NCCL's all-gather (the
# code before it, .scratch/s27/old): GPU tests of the new path, then the MLP block alternating, and GPT.
R=/tmp/res27a; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s27/old:$PYTHONPATH
for f in tests/test_gpu_random.py tests/test_parallel_gpu.py; do
  k="gathers or (layer_matrix and 11)"; [ $f = tests/test_parallel_gpu.py ] && k=layer_matrix
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f -k "$k" > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -2 $R/$(basename $f .py).log
done
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto"
for n in new1 old1 new2 old2; do
  P=$PYTHONPATH; [ ${n:0:3} = old ] && P=$OLD
  PYTHONPATH=$P timeout 120 $L --out $R/mlp_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp_$n.log
  echo "mlp $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -3 $R/mlp_$n.log
done
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_new.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt_new.log
echo "gpt new rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -5 $R/gpt_new.log
