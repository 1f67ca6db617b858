#!/usr/bin/env bash
# The Column backward's weight grad in parts as the gathered rows arrive by the copy engines (this
# tree) against NCCL's all-gather (old): GPU tests, MLP block alternating, GPT, a trace of the new.
R=/tmp/res27c; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s27/old:$PYTHONPATH
for f in tests/test_gpu_random.py tests/test_parallel_gpu.py tests/test_parallel_megatron_ddp.py; do
  k="gathers or (layer_matrix and 11)"; [ $f != tests/test_gpu_random.py ] && k="not compiles"
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f -k "$k" > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -2 $R/$(basename $f .py).log
done
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto"
for n in new1 old1 new2 old2; do
  P=$PYTHONPATH; [ ${n:0:3} = old ] && P=$OLD
  PYTHONPATH=$P timeout 120 $L --out $R/mlp_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp_$n.log
  echo "mlp $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -2 $R/mlp_$n.log
done
for n in new old; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD
  PYTHONPATH=$P timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt_$n.log
  echo "gpt $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/gpt_$n.log
done
mkdir -p $R/trace; REPEAT=1 timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s27/trace_layers.py $R/trace --block mlp --modes megatron,fused 2>&1 | grep -v '^W1\|Warning\|warn' > $R/trace/trace.log
echo "trace rc=${PIPESTATUS[0]} at ${SECONDS}s"; gzip $R/trace/*.json
