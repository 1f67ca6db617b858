#!/usr/bin/env bash
# The fused GPU tests on the committed code; the Megatron layer block and the GPTModel step.
R=/tmp/res24c; source .scratch/s24/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py 2>&1 | tail -4 | tee $R/tests_fused.log
echo "tests at ${SECONDS}s"
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,fused,auto --out $R/bench_layers.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_layers.log; echo "layers rc=$? at ${SECONDS}s"; tail -6 $R/bench_layers.log
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/bench_gpt.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt.log; echo "gpt rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt.log
