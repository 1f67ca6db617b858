#!/usr/bin/env bash
# The record: every preset shape (5 rounds), 16 unaligned shapes, auto at 1-16384 rows, graph replays.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15 PYTHONPATH=$PWD
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
timeout 200 python3 -m fluxlite.profile $(cat benchmarks/2026-11-26-h200x2-k/scripts/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 180 --no-progress --out $R/presets 2>&1 | grep -v '^W1' | grep -v measured > $R/presets.log; tail -1 $R/presets.log
U="ag:8192,5184,6976 ag:6144,7232,5440 ag:12288,4160,9664 ag:4096,9280,11072 ag:8192,6000,7000 ag:10240,3968,8832 ag:6144,10176,4416 ag:8192,7104,12352
   rs:8192,6976,5184 rs:6144,5440,7232 rs:12288,9664,4160 rs:4096,11072,9280 rs:8192,7000,6000 rs:10240,8832,3968 rs:6144,4416,10176 rs:8192,12352,7104"
timeout 90 python3 -m fluxlite.profile $(for s in $U; do echo --shape $s; done) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 75 --no-progress --out $R/unaligned 2>&1 | grep -v '^W1' | grep -v measured > $R/unaligned.log; tail -1 $R/unaligned.log
A="ag:1,8192,4096 ag:48,5120,13824 ag:700,8192,3584 ag:2048,4096,11008 ag:5000,6144,6144 ag:16384,8192,5120 ag:512,8192,4096 ag:64,8192,14336
   ag:1536,5120,6912 rs:4,8192,5120 rs:300,11008,4096 rs:1024,4096,8192 rs:3000,7168,7168 rs:12288,9664,4160 rs:8192,14336,8192 rs:256,14336,8192"
timeout 200 python3 -m fluxlite.profile --tune $(for s in $A; do echo --shape $s; done) --nproc 2 --impls sequential,decomposed,fused,auto \
  --rounds 11 --time-limit 180 --no-progress --out $R/auto 2>&1 | grep -v '^W1' | grep -v measured > $R/auto.log; tail -1 $R/auto.log
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --out $R/bench_graphs.json 2>&1 | grep -v '^W1' > $R/bench_graphs.log; tail -12 $R/bench_graphs.log
