#!/usr/bin/env bash
# A/B between the tree before this change (.scratch/s11/old = git archive 5e93aeb fluxlite) and the working tree,
# interleaved; 2 ranks sharing one GPU. Usage: ab.sh ROUNDS TAG SCRIPT [ARGS...]
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD; ROUNDS=$1; TAG=$2; SCRIPT=$ROOT/$3; shift 3
for round in $(seq "$ROUNDS"); do
  for tree in old new; do
    dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s11/old
    log=$OUT/${TAG}_${tree}_$round.log
    (cd "$dir" && PYTHONPATH=$dir timeout 150 torchrun --standalone --nproc-per-node 2 "$SCRIPT" "$@" > "$log" 2>&1)
    echo "== $TAG $tree round $round rc=$?"; grep -E "^graph|\||^==" "$log" | grep -v "^W1"
  done
done
