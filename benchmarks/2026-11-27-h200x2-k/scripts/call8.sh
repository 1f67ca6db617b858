#!/usr/bin/env bash
# Two GPUs: the profiler's GPU tests; fluxlite-profile with the eager mode at small and mid shapes (AG, GEMM-RS,
# GEMM-AllReduce), auto measured afresh (--tune), table, JSON and CSV kept.
R=/tmp/res30h; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
timeout 200 python3 -m pytest -q -m gpu tests/test_profile_cli.py -x 2>&1 | tail -4 > $R/tests.log; echo "tests rc=${PIPESTATUS[0]} at ${SECONDS}s"; cat $R/tests.log
FLUXLITE_CACHE_DIR=$R/cache timeout 240 python3 -m fluxlite.profile --nproc 2 --tune --rounds 7 --impls sequential,decomposed,fused,torch_symm_mem,auto \
  --shape ag:228,5872,3160 --shape ag:1942,2384,3344 --shape rs:472,2488,4328 --shape ar:8,14336,4096 --shape ar:64,8192,8192 \
  --shape ag:6474,6656,2816 --shape rs:11586,2496,2728 --out $R/profile > $R/profile.log 2>&1; echo "profile rc=$? at ${SECONDS}s"; cat $R/profile.log | cut -c1-250
