#!/usr/bin/env bash
# A/B of host time per call: fa77c20 (old) vs HEAD (new), interleaved on the same machine.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
for round in 1 2; do
  for tree in old new; do
    dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s8/old
    (cd $dir && PYTHONPATH=$dir timeout 120 torchrun --standalone --nproc-per-node 2 $ROOT/.scratch/s7/host.py --rounds 3 > $OUT/host_${tree}_$round.log 2>&1)
    echo "== $tree round $round rc=$?"; grep -v "^W1" $OUT/host_${tree}_$round.log | tail -4
  done
done
