#!/usr/bin/env bash
# Kineto traces of the MLP step, Row SP backward by the copy-engine gather (new) against the pull
# AG-GEMM (old); GPTModel once more each; GPU tests of the layers (incl. main_grad by addmm in place).
R=/tmp/res28b; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s28/old:$PYTHONPATH
for n in new old; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD; mkdir -p $R/$n
  PYTHONPATH=$P REPEAT=1 timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s28/trace_layers.py $R/$n --block mlp --modes megatron,fused 2>&1 | grep -v '^W1\|Warning\|warn' > $R/$n/trace.log
  echo "trace $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep "^fused" $R/$n/trace.log | head -2
done
for n in old new; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD
  PYTHONPATH=$P timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt_$n.log
  echo "gpt $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/gpt_$n.log
done
for f in tests/test_gpu_random.py tests/test_parallel_megatron_ddp.py tests/test_gpu_graphs.py; do
  k="gathers or layer_matrix"; [ $f != tests/test_gpu_random.py ] && k="not nothing"
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f -k "$k" > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -2 $R/$(basename $f .py).log
done
