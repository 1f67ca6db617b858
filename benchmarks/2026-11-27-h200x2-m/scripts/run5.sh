# 52cd55f's fluxlite, as run 3: two even splits against 4:3:1 at 18 shapes drawn at random (rand_shapes.txt) and two more
R=/tmp/r5; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R PYTHONPATH=benchmarks/2026-11-27-h200x2-m/scripts/old:$PYTHONPATH
SH=$(cat benchmarks/2026-11-27-h200x2-m/scripts/rand_shapes.txt),6000x7000x6000,6144x7000x5120 VARIANTS=2,3 ROUNDS=7 OUTJ=rand.json \
  timeout 300 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-m/scripts/splitexp.py 2>&1 | tee $R/splitexp.log
