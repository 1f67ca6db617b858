R=/tmp/r9; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 140 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --rounds 5 --no-sequence-parallel --ceiling --out $R/gpt_nosp.json > $R/gpt_nosp.log 2>&1; echo "gpt nosp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt_nosp.log | tail -9
for L in sp replicated; do
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --prefill 2048,8192 --decode-layout $L --out $R/inf_$L.json > $R/inf_$L.log 2>&1; echo "inference $L rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/inf_$L.log | tail -16
done
