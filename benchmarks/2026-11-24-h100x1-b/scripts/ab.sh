#!/usr/bin/env bash
# A/B of a benchmark script between two fluxlite trees, interleaved: old = the tree before this
# session's changes (git archive 7efe554 fluxlite | tar -x -C .scratch/s9/old), new = the working tree;
# 2 ranks sharing one GPU. Usage: ab.sh ROUNDS SCRIPT [ARGS...]
#   graph launch:  ab.sh 3 benchmarks/2026-11-24-h100x1-a/scripts/graph_nodes.py --launches 20 --skip 2 --no-refs
#   host per call: ab.sh 2 benchmarks/2026-11-24-h100x1-a/scripts/host.py --warm --rounds 12
# (not --n: torchrun takes it for an abbreviation of its own options)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 FLUXLITE_GPU_SHARE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD; ROUNDS=$1; SCRIPT=$ROOT/$2; shift 2
for round in $(seq "$ROUNDS"); do
  for tree in old new; do
    dir=$ROOT; [[ $tree == old ]] && dir=$ROOT/.scratch/s9/old
    log=$OUT/$(basename "$SCRIPT" .py)_${tree}_$round.log
    (cd "$dir" && PYTHONPATH=$dir timeout 150 torchrun --standalone --nproc-per-node 2 "$SCRIPT" "$@" > "$log" 2>&1)
    echo "== $tree round $round rc=$?"; grep -E "^graph|\|" "$log" | grep -v "^W1"
  done
done
