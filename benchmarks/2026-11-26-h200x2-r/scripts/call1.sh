#!/usr/bin/env bash
# auto from 1 to 16384 rows against its candidates (the latency tie rule), profiler's own rounds; GPU tests of the fused ops.
R=/tmp/res18a2; source .scratch/s18/common.sh
export FLUXLITE_CACHE_DIR=$R/cache
S="--shape rs:2,4096,4096 --shape ag:8,8192,3584 --shape rs:64,5120,5120 --shape ag:200,4096,6144 --shape rs:256,8192,8192 --shape ag:256,4096,4096 --shape rs:512,4096,4096 --shape ag:640,6656,4608 --shape rs:1024,4096,8192 --shape ag:1536,8192,2816 --shape rs:2048,3584,4096 --shape ag:3000,4096,7168 --shape rs:4096,7168,5120 --shape ag:6000,5120,3456 --shape rs:8192,2304,6144 --shape ag:12288,4096,4096 --shape rs:16384,1792,4096 --shape ag:16384,8192,1024"
timeout 460 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,decomposed,fused,auto --rounds 7 --tune \
  --time-limit 420 --no-progress --out $R/auto 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto.log; tail -30 $R/auto.log


