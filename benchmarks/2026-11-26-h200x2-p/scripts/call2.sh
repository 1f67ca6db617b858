#!/usr/bin/env bash
# Host cost with repeats for every impl; auto's decode choice; the RS auto row the profile test flagged; GPU tests.
R=/tmp/res16b; source .scratch/s16/common.sh
export FLUXLITE_CACHE_DIR=$R/cache
timeout 240 torchrun --standalone --nproc-per-node 2 .scratch/s16/host_prof.py "1,14336,8192 16,4096,4096 256,8192,8192 8,8192,8192 64,3584,5120" > $R/host_prof.log 2>&1; grep -E "^==|^   [a-z]" $R/host_prof.log | cut -c1-250
unset FLUXLITE_CACHE_DIR
timeout 120 python3 -m fluxlite.profile --shape rs:4096,14336,8192 --nproc 2 --impls sequential,decomposed,fused,auto --rounds 7 --no-progress --out $R/rs_prof > $R/rs_prof.log 2>&1; tail -4 $R/rs_prof.log | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/rs_prof/profile.json')); r=d['rows'][0] if 'rows' in d else d
print({k: r[k] for k in r if k in ('auto','times_ms')})" 2>&1 | cut -c1-1500
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_gemm_ar.py tests/test_gpu_graphs.py > $R/gpu_tests.log 2>&1; tail -3 $R/gpu_tests.log
