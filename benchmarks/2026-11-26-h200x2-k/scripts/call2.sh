#!/usr/bin/env bash
# Traces of AG (matmul vs Triton), the layer block and GPTModel step against Megatron, every preset shape.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
git log -1 --format=%h > $R/commit.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD
OUT=$R timeout 90 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-k/scripts/trace_ag.py "8192,4096,7168 16384,4096,3072" 2>&1 | grep -v '^W1' | tail -3
timeout 230 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 3 \
  --time-limit 200 --no-progress --out $R/presets 2>&1 | grep -v '^W1' | grep -v measured | tee $R/presets.log | tail -3
PYTHONPATH=/tmp/site:$PWD timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --modes megatron,sequential,fused,auto \
  --out $R/bench_layers.json 2>&1 | tee $R/bench_layers.log | grep -v '^W1' | tail -8
PYTHONPATH=/tmp/site:$PWD timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/bench_gpt.json 2>&1 \
  | tee $R/bench_gpt.log | grep -v '^W1' | tail -8
