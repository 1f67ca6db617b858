#!/usr/bin/env bash
# main_grad accumulate and gather microbench; A/B of the Row SP backward through the copy-engine gather
# (new) against ag_gemm_gathered's pull (old = HEAD's fluxlite) on the MLP block and GPTModel; GPU tests.
R=/tmp/res28a; source .scratch/s27/common.sh
OLD=$PWD/.scratch/s28/old:$PYTHONPATH
timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s28/mg.py 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mg.log; echo "mg rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -i "acc\|SUMMARY\|diff\|Error" $R/mg.log | head -30
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto"
for n in new1 old1 new2 old2 new3 old3; do
  P=$PYTHONPATH; [[ $n == *old* ]] && P=$OLD
  PYTHONPATH=$P timeout 100 $L --out $R/mlp_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp_$n.log
  echo "mlp $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/mlp_$n.log | tail -3
done
for n in new old; do
  P=$PYTHONPATH; [ $n = old ] && P=$OLD
  PYTHONPATH=$P timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt_$n.log
  echo "gpt $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A3 "^ *mode" $R/gpt_$n.log
done
timeout 90 python3 -m pytest -x -q tests/test_parallel_gpu.py > $R/t_parallel_gpu.log 2>&1; echo "test_parallel_gpu rc=$? at ${SECONDS}s"; tail -3 $R/t_parallel_gpu.log
timeout 80 python3 -m pytest -x -q tests/test_norm_linear_megatron.py > $R/t_norm_meg.log 2>&1; echo "norm_meg rc=$? at ${SECONDS}s"; tail -3 $R/t_norm_meg.log
