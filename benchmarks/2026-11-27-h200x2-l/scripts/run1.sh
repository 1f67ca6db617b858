R=/tmp/r1; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
export OUTJ=$R/graph31.json
timeout 400 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-l/scripts/graph31.py 2>&1 | grep -v Warning | tee $R/graph31.log
