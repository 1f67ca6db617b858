# 52cd55f's fluxlite, as run 3: timelines at 6000x7000->5000, two even splits and 4:3:1
R=/tmp/r4; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R PYTHONPATH=benchmarks/2026-11-27-h200x2-m/scripts/old:$PYTHONPATH
for w in "" 4,3,1; do
  t=${w:-base}; SPLIT_WEIGHTS=$w TAG=${t//,/} SH=6000x7000x5000 timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-m/scripts/trace32.py
done
