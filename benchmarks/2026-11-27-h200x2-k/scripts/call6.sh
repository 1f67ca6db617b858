#!/usr/bin/env bash
# Two GPUs, one machine: act30.py with HEAD's code (old: the both choice on device throughput) then this tree's (both on
# eager calls back to back), eight shapes of 70-6474 rows (four of run 5's, four new), AG-GEMM GELU/SwiGLU/none and
# GEMM-RS; then bench_layers MLP with auto (this tree).
R=/tmp/res30f; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
S=228x5872x3160,1050x5456x7880,1942x2384x3344,4390x2960x3216,70x2296x3112,472x2488x4328,3206x5600x5552,6474x6656x2816
for v in old new; do
  P=$PWD; [ $v = old ] && P=$PWD/benchmarks/2026-11-27-h200x2-k/scripts/old:$PWD
  PYTHONPATH=$P:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_$v ACTS=gelu,swiglu,none,rs SHAPES=$S \
    timeout 240 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-k/scripts/act30.py $R/act30_$v.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func\|symm_mem' > $R/act30_$v.log; echo "act30 $v rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
FLUXLITE_CACHE_DIR=$R/cache_mlp timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp.log; echo "mlp rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A4 "^ *mode" $R/mlp.log | tail -4
paste <(cut -c1-50 $R/act30_old.log) <(cut -c1-50 $R/act30_new.log)
