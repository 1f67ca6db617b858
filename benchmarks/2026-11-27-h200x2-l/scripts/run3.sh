R=/tmp/r2; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
export OUTJ=$R/trace31.json SH=8192x8192x14336,992x2048x2816,4096x8192x5120
timeout 300 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-l/scripts/trace31.py 2>&1 | grep -v Warning | tee $R/trace31.log
nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv | tee -a $R/trace31.log
