#!/usr/bin/env bash
# auto where its latency choice was a config other than the default, or lost: 14 shapes, the settled-best rule.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13f; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
export PYTHONPATH=$PWD
S="ag:48,5120,13824 ag:360,3584,18944 rs:2,6144,8192 ag:2,8192,4096 ar:1,8192,8192 ag:1200,5120,10240 rs:4,8192,5120
   ag:512,8192,4096 rs:1024,4096,8192 rs:3000,7168,7168 ag:6,4096,12288 ag:2048,4096,11008 ag:16384,5120,3456 rs:4400,6144,10240"
FLUXLITE_CACHE_DIR=$R/cache timeout 150 python3 -m fluxlite.profile --tune $(for s in $S; do echo --shape $s; done) --nproc 2 \
  --impls sequential,decomposed,fused,auto --rounds 11 --time-limit 130 --no-progress --out $R/auto 2>&1 | grep -v '^W1' | grep -v measured > $R/auto.log
tail -1 $R/auto.log
