#!/usr/bin/env bash
# GPU tests around the Column backward's copy-engine gather: graphs (layers captured), safety, GEMM-AR.
R=/tmp/res27e; source .scratch/s27/common.sh
for f in tests/test_gpu_graphs.py tests/test_gpu_safety.py tests/test_gpu_gemm_ar.py; do
  timeout 140 python3 -m pytest -m gpu -q -p no:cacheprovider -x $f > $R/$(basename $f .py).log 2>&1
  echo "$f rc=$? at ${SECONDS}s"; tail -3 $R/$(basename $f .py).log
done
