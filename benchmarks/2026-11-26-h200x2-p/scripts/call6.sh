#!/usr/bin/env bash
# The profiler with auto at decode and training sizes (GEMM-AllReduce, and small AG/RS), every impl repeating;
# the Megatron GPU tests (the layers' calls now repeat for sequential too).
R=/tmp/res16f; source .scratch/s16/common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
timeout 260 python3 -m fluxlite.profile --tune --nproc 2 --impls sequential,decomposed,fused,auto --rounds 7 --out $R/ar_profile --no-progress \
  --shape ar:1,8192,8192 --shape ar:16,14336,8192 --shape ar:128,4096,5120 --shape ar:256,11008,4096 \
  --shape ar:2048,4096,8192 --shape ar:1024,14336,8192 --shape ar:3072,5000,7000 --shape ar:4096,8192,6144 \
  --shape ar:8192,3000,5000 --shape ar:16384,4096,8192 --shape ar:1,4096,4096 --shape ar:8,8192,8192 \
  --shape ar:64,3584,5120 --shape ar:32,5120,5120 --shape rs:512,4096,4096 --shape ag:256,4096,4096 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_profile.log; grep -A20 "op, M x K" $R/ar_profile.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_parallel_megatron.py tests/test_parallel_megatron_ddp.py tests/test_norm_linear_megatron.py 2>&1 | tail -7 | tee -a $R/gpu_tests.log
