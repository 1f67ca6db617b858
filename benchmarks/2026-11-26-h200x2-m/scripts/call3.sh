#!/usr/bin/env bash
# Graph replay host time by node kind; auto at the old 16 and new 18 shapes with the timer declaring
# modes outside the timed part; bench_graphs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13c; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD
timeout 80 torchrun --standalone --nproc-per-node 2 .scratch/s13/graph_nodes.py 2>&1 | grep -v "^W1\|Warning\|symm_mem" | tee $R/graph_nodes.log
source "$(dirname "$0")/auto_shapes.sh"  # OLD, NEW
prof() {  # out shapes
  FLUXLITE_CACHE_DIR=$R/cache timeout 180 python3 -m fluxlite.profile --tune $(for s in $2; do echo --shape $s; done) --nproc 2 \
    --impls sequential,decomposed,fused,auto --rounds 11 --time-limit 155 --no-progress --out $R/$1 2>&1 | grep -v '^W1' | grep -v measured > $R/$1.log
  tail -1 $R/$1.log
}
prof auto_new "$NEW"
prof auto_old "$OLD"
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs.json 2>&1 | grep -v '^W1' > $R/graphs.log; tail -8 $R/graphs.log | cut -c1-220
