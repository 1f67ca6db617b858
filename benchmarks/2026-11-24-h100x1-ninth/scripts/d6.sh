#!/usr/bin/env bash
# Host time of cuGraphLaunch of a replayed fused call's own graph, before (old: the tree before the
# arrival/clear move, unpacked in .scratch/s9/old) and after, 2 ranks sharing one H100, 3 rounds.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
SCRIPT=$ROOT/benchmarks/2026-11-24-h100x1-eighth/scripts/graph_nodes.py
for round in 1 2 3; do
  for tree in old new; do
    dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s9/old
    (cd $dir && PYTHONPATH=$dir timeout 100 torchrun --standalone --nproc-per-node 2 $SCRIPT --launches 20 --skip 2 --no-refs \
      > $OUT/launch_${tree}_$round.log 2>&1)
    echo "== launch $tree round $round rc=$?"; grep "^graph" $OUT/launch_${tree}_$round.log
  done
done
