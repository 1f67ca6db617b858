#!/usr/bin/env bash
# Where auto's latency-mode call loses to the forced call of its own choice; the Megatron and profiler GPU tests.
R=/tmp/res18c; source .scratch/s18/common.sh
timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s18/auto_gap.py ag:8,8192,3584 rs:64,5120,5120 ag:640,6656,4608 rs:1024,4096,8192 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_gap.log; echo "auto_gap rc=$? at ${SECONDS}s"; grep -v "^ \+[0-9]\+ \+[0-9.]\+ \+[0-9.]\+ \+[0-9.]\+ \+[0-9.]\+ /usr\|^$" $R/auto_gap.log | head -80
for f in tests/test_parallel_megatron.py tests/test_norm_linear_megatron.py tests/test_parallel_megatron_ddp.py tests/test_train_gpt.py tests/test_profile_cli.py tests/test_gpu_cublaslt.py; do
  left=$((570 - SECONDS)); [ $left -lt 30 ] && { echo "$f skipped (time)"; continue; }
  timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -1 $R/$(basename $f .py).log
done
