#!/usr/bin/env bash
# Validation of the matmul consumer + producer feed on 2 GPUs: the GPU tests not yet run at this code.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=20
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
nvidia-smi -L; git log --oneline -1 2>/dev/null
run() { local b=$1; shift; echo "== $* (bound $b s)"; SECONDS=0; timeout $b python3 -m pytest -m gpu -q -p no:cacheprovider -x "$@" 2>&1 | tail -6 | tee -a $OUT/tests.log; echo "rc=${PIPESTATUS[0]} ${SECONDS}s"; }
run 130 tests/test_parallel_megatron.py tests/test_train_gpt.py
run 120 tests/test_parallel_gpu.py
run 230 tests/test_gpu_random.py
run 60 tests/test_gpu_epilogue.py
