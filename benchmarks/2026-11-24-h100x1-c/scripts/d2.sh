#!/usr/bin/env bash
# A/B of scripts/bench_graphs.py (user-graph host per call) between 7efe554 (old) and HEAD (new),
# 2 ranks sharing one GPU: only host times mean something.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; ROOT=$PWD
for tree in new old; do
  dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s9/old
  (cd "$dir" && PYTHONPATH=$dir timeout 270 torchrun --standalone --nproc-per-node 2 $dir/scripts/bench_graphs.py --rounds 3 --out $OUT/graphs_$tree.json > $OUT/graphs_$tree.log 2>&1)
  echo "== $tree rc=$?"; grep -v "^W1" $OUT/graphs_$tree.log | tail -14
done
