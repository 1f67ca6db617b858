#!/usr/bin/env bash
# GEMM-AllReduce with the flat one-shot kernel: the profiler with auto at decode and training sizes; the
# inference stack (replicated decode: one-shot GEMM-AllReduce); the Megatron GPU tests.
R=/tmp/res15d; source .scratch/s15/common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
timeout 230 python3 -m fluxlite.profile --tune --nproc 2 --impls sequential,decomposed,fused,auto --rounds 9 --out $R/ar_profile \
  --shape ar:1,8192,8192 --shape ar:16,14336,8192 --shape ar:128,4096,5120 --shape ar:256,11008,4096 \
  --shape ar:2048,4096,8192 --shape ar:1024,14336,8192 --shape ar:3072,5000,7000 --shape ar:4096,8192,6144 \
  --shape ar:8192,3000,5000 --shape ar:16384,4096,8192 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar_profile.log; grep -A16 "op, M x K" $R/ar_profile.log
timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout replicated --out $R/bench_inference_replicated.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_replicated.log; tail -16 $R/bench_inference_replicated.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4 tests/test_parallel_megatron.py tests/test_parallel_megatron_ddp.py tests/test_norm_linear_megatron.py 2>&1 | tail -7 | tee -a $R/gpu_tests.log
