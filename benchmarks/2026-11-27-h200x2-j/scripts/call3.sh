#!/usr/bin/env bash
# Two GPUs, HEAD's code: the DDP/main_grad GPU test, the MLP block and GPTModel against Megatron's layers, and the
# Triton GEMM core against cuBLAS on GPU 0 (a third H200 next to calls 1 and 2).
R=/tmp/res29c; source .scratch/s29/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee $R/smi.txt
timeout 150 python3 -m pytest -x -q -p no:cacheprovider tests/test_parallel_megatron_ddp.py > $R/t_ddp.log 2>&1; echo "ddp rc=$? at ${SECONDS}s"; tail -3 $R/t_ddp.log
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp.log; echo "mlp rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A4 "^ *mode" $R/mlp.log | tail -4
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt.log; echo "gpt rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A4 "^ *mode" $R/gpt.log
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 .scratch/s29/gemm29b.py $R/gemm.json 2>&1 | grep -v Warning > $R/gemm.log; echo "gemm rc=${PIPESTATUS[0]} at ${SECONDS}s"; sed "s/128x256x64w8//g" $R/gemm.log
