R=/tmp/r6; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
run() { timeout 150 torchrun --standalone --nproc-per-node 2 "$@" 2>&1 | grep -v 'Warning\|warn\|^W1127\|\*\*\*\*\|OMP_NUM' ; }
run benchmarks/2026-11-27-h200x2-l/scripts/dgrad_ar_gpt.py --no-sequence-parallel --out $R/dgrad_ar1.json | tee $R/dgrad_ar1.log
run scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp1.json | tee $R/nosp1.log
run benchmarks/2026-11-27-h200x2-l/scripts/dgrad_ar_gpt.py --no-sequence-parallel --out $R/dgrad_ar2.json | tee $R/dgrad_ar2.log
