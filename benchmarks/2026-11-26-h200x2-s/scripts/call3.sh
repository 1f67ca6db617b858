#!/usr/bin/env bash
# The captured-auto graph test; which implementation auto runs per mode inside the profiler's rounds; megatron-core
# 0.19.2 on two GPUs: its GPU tests and the GPTModel step with and without sequence parallelism.
R=/tmp/res19c; source .scratch/s19/common.sh
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py -k captured_auto 2>&1 | tail -3 | tee $R/graphs_test.log
echo "graphs test at ${SECONDS}s"
timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s19/auto_which.py rs:896,7168,3072 rs:4,5120,3072 ag:96,5632,2560 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/auto_which.log; echo "auto_which rc=$? at ${SECONDS}s"; grep -v "^\[" $R/auto_which.log | tail -20
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site19 .whl_all/0.19.2/*.whl
export PYTHONPATH=$PWD:/tmp/site19
python3 -c "import megatron.core as m, sys; print('megatron-core', m.__version__, sys.version.split()[0])" | tee $R/mcore.txt
for f in tests/test_parallel_megatron.py tests/test_parallel_megatron_ddp.py tests/test_norm_linear_megatron.py; do
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=2 $f 2>&1 | tail -3 | tee -a $R/mcore19_tests.log
done
echo "mcore tests at ${SECONDS}s"
for part in sp nosp; do
  extra=(); [[ $part == nosp ]] && extra=(--no-sequence-parallel)
  timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py "${extra[@]}" --out $R/bench_gpt19_$part.json 2>&1 \
    | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt19_$part.log; echo "gpt $part rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt19_$part.log
done
