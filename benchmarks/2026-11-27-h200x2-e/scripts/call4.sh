#!/usr/bin/env bash
# The fused GPU tests that the last run's bound cut off; the GPTModel step twice more, the layer block once more.
R=/tmp/res24d; source .scratch/s24/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "rs_matmul or workspace or unfused or plain_kernel" 2>&1 | tail -3 | tee $R/tests_fused_rest.log
echo "tests at ${SECONDS}s"
for i in 1 2; do
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/bench_gpt$i.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt$i.log; echo "gpt$i rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt$i.log | head -5
done
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,fused,auto --out $R/bench_layers.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_layers.log; echo "layers rc=$? at ${SECONDS}s"; tail -6 $R/bench_layers.log
