R=/tmp/r3; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
export SH=ag:992x2048x2816,ag:128x4096x2048,ag:16x8192x8192,ag:4096x8192x5120,ag:3000x5000x7000,ag:2048x4096x4096,ag:256x5120x3456
export ROUNDS=7
python3 - <<'PY' 2>&1 | tee $R/pdl_check.log
import triton, inspect
from triton.backends.nvidia.compiler import CUDAOptions
print(triton.__version__, 'launch_pdl' in CUDAOptions.__dataclass_fields__)
import triton.language.extra.cuda as c; print(hasattr(c, 'gdc_wait'))
PY
for side in old new old new; do
  if [ $side = old ]; then PP=benchmarks/2026-11-27-h200x2-l/scripts/old:$PYTHONPATH; else PP=$PYTHONPATH; fi
  OUTJ=$R/graph_$side.$RANDOM.json PYTHONPATH=$PP timeout 240 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-l/scripts/graph31.py 2>&1 | grep -v Warning | sed "s/^/[$side] /" | tee -a $R/graph.log
done
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_graphs.py tests/test_gpu_random.py -x 2>&1 | tail -15 | tee $R/tests.log
