#!/usr/bin/env bash
# Two GPUs, one machine: act30.py, HEAD's code (old) then this tree's (new): GEMM-AllReduce and AG-GEMM at decode sizes
# (8-256 rows), then four shapes drawn at random (seeded) with GEMM-AllReduce, AG-GEMM with GELU and GEMM-RS.
R=/tmp/res30g; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
for v in old new; do
  P=$PWD; [ $v = old ] && P=$PWD/benchmarks/2026-11-27-h200x2-k/scripts/old:$PWD
  PYTHONPATH=$P:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_$v ACTS=ar,none SHAPES=8x14336x4096,64x8192x8192,256x3584x7168,2x4096x8192 \
    timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/act30.py $R/dec_$v.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/dec_$v.log; echo "dec $v rc=${PIPESTATUS[0]} at ${SECONDS}s"
  PYTHONPATH=$P:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_$v ACTS=ar,gelu,rs SHAPES=94x7096x8160,690x7976x4320,2644x1616x6944,11586x2496x2728 \
    timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/act30.py $R/rand_$v.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/rand_$v.log; echo "rand $v rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
paste <(cut -c1-52 $R/dec_old.log) <(cut -c1-52 $R/dec_new.log); paste <(cut -c1-52 $R/rand_old.log) <(cut -c1-52 $R/rand_new.log)
