# HEAD of the set (52cd55f): the no-SP GPTModel step with its ceiling row, the no-SP MLP block, and
# five profiles of the same eight GEMM-AllReduce shapes (their spread between processes)
R=/tmp/r1; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
F='^W1\|Warn\|warn\|\*\*\*\*\|OMP_NUM'
timeout 110 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --ceiling --out $R/gpt_nosp.json 2>&1 | grep -v "$F" > $R/gpt_nosp.log
timeout 80 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --no-sequence-parallel --block mlp --out $R/mlp_nosp.json 2>&1 | grep -v "$F" > $R/mlp_nosp.log
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:8192,5120,8192 --shape ar:8192,28672,8192 --shape ar:4096,8192,8192 --shape ar:16384,4096,8192 --shape ar:8192,16384,8192 --shape ar:6000,7000,5000"
for t in a b c d e; do
  timeout 90 torchrun --standalone --nproc-per-node 2 -m fluxlite.profile $S --impls sequential,fused --rounds 7 --no-progress --out $R/prof_$t > $R/prof_$t.log 2>&1
done
