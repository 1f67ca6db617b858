#!/usr/bin/env bash
# auto at the old 16 and new 18 shapes: latency as the median of three calls after an untimed one,
# no capture query for a repeated call in a declared mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13e; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD

source "$(dirname "$0")/auto_shapes.sh"  # OLD, NEW
prof() {  # out shapes
  FLUXLITE_CACHE_DIR=$R/cache timeout 180 python3 -m fluxlite.profile --tune $(for s in $2; do echo --shape $s; done) --nproc 2 \
    --impls sequential,decomposed,fused,auto --rounds 11 --time-limit 155 --no-progress --out $R/$1 2>&1 | grep -v '^W1' | grep -v measured > $R/$1.log
  tail -1 $R/$1.log
}
prof auto_new "$NEW"
prof auto_old "$OLD"

