#!/usr/bin/env bash
# A/B between the tree before this change (.scratch/s11/old = git archive 5e93aeb fluxlite, and
# scripts/bench_graphs.py of that commit) and the working tree, interleaved; 2 ranks sharing one GPU.
# Usage: [T=timeout] ab.sh ROUNDS TAG SCRIPT [ARGS...]  (SCRIPT relative; a tree's own copy wins)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD; ROUNDS=$1; TAG=$2; REL=$3; shift 3
for round in $(seq "$ROUNDS"); do
  for tree in old new; do
    dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s11/old
    log=$OUT/${TAG}_${tree}_$round.log
    SCRIPT=$ROOT/$REL; [[ -f $dir/$REL ]] && SCRIPT=$dir/$REL
    (cd "$dir" && PYTHONPATH=$dir timeout ${T:-150} torchrun --standalone --nproc-per-node 2 "$SCRIPT" "$@" > "$log" 2>&1)
    echo "== $TAG $tree round $round rc=$?"; grep -E "^graph|\||^==" "$log" | grep -v "^W1"
  done
done
