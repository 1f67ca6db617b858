#!/usr/bin/env bash
# The record: every preset shape (5 rounds) with clocks logged; the layer block and GPTModel step against Megatron.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res12e; rm -rf $R; mkdir -p $R; trap 'kill $DM 2>/dev/null; tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 & DM=$!
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD
timeout 200 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 185 --no-progress --out $R/presets 2>&1 | grep -v '^W1' | grep -v measured > $R/presets.log; tail -1 $R/presets.log
PYTHONPATH=/tmp/site:$PWD timeout 125 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,sequential,fused,auto \
  --out $R/bench_layers.json 2>&1 | tee $R/bench_layers.log | grep -v '^W1' | tail -7
PYTHONPATH=/tmp/site:$PWD timeout 125 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/bench_gpt.json 2>&1 \
  | tee $R/bench_gpt.log | grep -v '^W1' | tail -6
