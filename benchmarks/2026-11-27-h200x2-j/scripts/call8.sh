#!/usr/bin/env bash
# Two GPUs, HEAD's code: AG-GEMM fused, auto and sequential with no activation, GELU and SwiGLU at K off 64 (and one
# aligned shape), in one harness; then the epilogue GPU tests (every activation without a row scale, fused and sequential).
R=/tmp/res29h; source .scratch/s29/common.sh
NAMES=fused,auto,sequential ACTS=none,gelu,swiglu SHAPES=16384x2000x6672,8192x5000x7000,3184x15480x7464,8192x8192x14336 \
  timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s29/act.py $R/act.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func' > $R/act.log; echo "act rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep "fused/seq" $R/act.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_epilogue.py > $R/t_epilogue.log 2>&1; echo "epilogue rc=$? at ${SECONDS}s"; tail -3 $R/t_epilogue.log
