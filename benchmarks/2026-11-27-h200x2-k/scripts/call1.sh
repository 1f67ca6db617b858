#!/usr/bin/env bash
# Two GPUs: the layer activation GPU test and the epilogue GPU tests; act.py with fused, auto and sequential
# (no activation, GELU, SwiGLU) with the dispatch records kept; bench_layers MLP with auto, records kept.
R=/tmp/res30a; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
timeout 200 python3 -m pytest -q -m gpu tests/test_parallel_gpu.py::test_column_layer_activations_2_gpus tests/test_gpu_epilogue.py -x 2>&1 | tail -15 > $R/tests.log; echo "tests rc=${PIPESTATUS[0]} at ${SECONDS}s"; tail -3 $R/tests.log
FLUXLITE_CACHE_DIR=$R/cache_act NAMES=fused,auto,sequential ACTS=none,gelu,swiglu SHAPES=16384x2000x6672,8192x5000x7000,3184x15480x7464,8192x8192x14336 \
  timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-j/scripts/act.py $R/act.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func' > $R/act.log; echo "act rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep "fused/seq" $R/act.log
FLUXLITE_CACHE_DIR=$R/cache_mlp timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json 2>&1 | grep -v '^W1\|Warning\|warn' > $R/mlp.log; echo "mlp rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep -A4 "^ *mode" $R/mlp.log | tail -4
