#!/usr/bin/env bash
# Shapes with K and N multiples of 8 but not of 128, over 0.5 ms, in no earlier list: fused against
# the limit, sequential and torch's fused ops. Then the Megatron client: its GPU test, the GPTModel
# step with sequence parallelism, and the layer block.
R=/tmp/res22b; source .scratch/s22/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
U="--shape ag:16384,5640,6112 --shape rs:10240,4080,7016 --shape ag:16384,6984,8608 --shape rs:8192,4968,7832 --shape ag:6000,3376,13432 --shape rs:6144,4784,9160 --shape ag:6144,7696,7064 --shape rs:6144,9136,10560 --shape ag:6144,10184,10200 --shape rs:8192,11832,7184 --shape ag:6000,6560,13928 --shape rs:10240,10736,4464"
timeout 250 python3 -m fluxlite.profile --shape ag:4096,8192,4096 $U --nproc 2 --impls sequential,fused,torch_symm_mem --rounds 5 \
  --time-limit 230 --no-progress --out $R/unaligned8 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/unaligned8.log; echo "unaligned8 rc=$? at ${SECONDS}s"
head -16 $R/unaligned8.log | cut -c1-150
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron.py 2>&1 | tail -3 | tee $R/tests.log
echo "tests at ${SECONDS}s"
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/bench_gpt.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt.log; echo "gpt rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt.log
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,fused,auto --out $R/bench_layers.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_layers.log; echo "layers rc=$? at ${SECONDS}s"; tail -6 $R/bench_layers.log
