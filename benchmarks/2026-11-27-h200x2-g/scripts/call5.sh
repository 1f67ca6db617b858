#!/usr/bin/env bash
# Everything under CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue per GPU, as Megatron's training
# sets): the MLP block and the whole block against Megatron, the GPTModel step, a few GPU test files,
# and bench_overlap at four shapes.
R=/tmp/res26e; source .scratch/s26/common.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
L="torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py"
for n in mlp block; do
  B=mlp; M=megatron,fused,auto,sequential; [ $n = block ] && B=transformer && M=megatron,fused,auto
  timeout 150 $L --block $B --modes $M --out $R/layers_$n.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/layers_$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -4 $R/layers_$n.log
done
timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/gpt.log
echo "gpt rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -6 $R/gpt.log
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_overlap.py --rounds 5 --out $R/bo_cdmc1.json \
  --shapes ag:8192,8192,14336 rs:8192,14336,8192 rs:8192,4096,8192 rs:10240,4080,7016 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bo_cdmc1.log
echo "overlap rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -o "^[ar]s [0-9x>-]*: .*fused/limit [0-9.]*\|lat fused/seq [0-9.]*\|failed.*" $R/bo_cdmc1.log
for f in tests/test_gpu_gemm_ar.py tests/test_parallel_gpu.py tests/test_gpu_random.py; do
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -2 $R/$(basename $f .py).log
done
