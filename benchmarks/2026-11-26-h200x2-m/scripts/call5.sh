#!/usr/bin/env bash
# auto at the old 16 and new 18 shapes: latency as the median of three calls after an untimed one,
# no capture query for a repeated call in a declared mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13e; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD

OLD="ag:2,8192,4096 ag:48,5120,13824 ag:700,8192,3584 ag:2048,4096,11008 ag:5000,6144,6144 ag:16384,8192,5120 ag:512,8192,4096 ag:64,8192,14336
   ag:1536,5120,6912 rs:4,8192,5120 rs:300,11008,4096 rs:1024,4096,8192 rs:3000,7168,7168 rs:12288,9664,4160 rs:8192,14336,8192 rs:256,14336,8192"
NEW="ag:6,4096,12288 ag:96,7168,9216 ag:360,3584,18944 ag:1200,5120,10240 ag:2600,8192,7168 ag:6144,3072,8192 ag:10000,4096,14336 ag:16384,5120,3456
   rs:2,6144,8192 rs:40,14336,5120 rs:640,9216,6144 rs:1800,18944,3584 rs:4400,6144,10240 rs:7000,13824,5120 rs:12000,4096,6144 rs:16384,8960,3584
   ar:1,8192,8192 ar:4096,8192,8192"
prof() {  # out shapes
  FLUXLITE_CACHE_DIR=$R/cache timeout 180 python3 -m fluxlite.profile --tune $(for s in $2; do echo --shape $s; done) --nproc 2 \
    --impls sequential,decomposed,fused,auto --rounds 11 --time-limit 155 --no-progress --out $R/$1 2>&1 | grep -v '^W1' | grep -v measured > $R/$1.log
  tail -1 $R/$1.log
}
prof auto_new "$NEW"
prof auto_old "$OLD"

