# 52cd55f's fluxlite (git archive 52cd55f fluxlite | tar -x -C benchmarks/2026-11-27-h200x2-m/scripts/old): the matmul consumer's splits
# 2 even, 4:3:1, 8:4:2:1, 16:8:4:2:1, interleaved in one process; then timelines of 4:3:1 and 8:4:2:1
R=/tmp/r3; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R PYTHONPATH=benchmarks/2026-11-27-h200x2-m/scripts/old:$PYTHONPATH
SH=16384x4096x8192,8192x28672x8192,8192x16384x8192,8192x14336x8192,8192x5120x8192,8192x4096x8192,4096x8192x8192,4096x14336x8192,6000x7000x5000,5000x6000x7000 ROUNDS=7 \
  timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-m/scripts/splitexp.py 2>&1 | tee $R/splitexp.log
for w in 4,3,1 8,4,2,1; do
  SPLIT_WEIGHTS=$w TAG=${w//,/} SH=8192x4096x8192,8192x14336x8192 timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-m/scripts/trace32.py
done
