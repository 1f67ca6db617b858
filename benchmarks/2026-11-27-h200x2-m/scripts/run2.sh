# 52cd55f: kineto timelines of 10 queued two-shot calls at two shapes, and three more profiles as run 1's
R=/tmp/r2; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R
TAG=base SH=8192x4096x8192,8192x14336x8192 timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-m/scripts/trace32.py
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:8192,5120,8192 --shape ar:8192,28672,8192 --shape ar:4096,8192,8192 --shape ar:16384,4096,8192 --shape ar:8192,16384,8192 --shape ar:6000,7000,5000"
for t in f g h; do
  timeout 90 torchrun --standalone --nproc-per-node 2 -m fluxlite.profile $S --impls sequential,fused --rounds 7 --no-progress --out $R/prof_$t > $R/prof_$t.log 2>&1
done
