R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 100 python3 benchmarks/2026-11-28-h200x2-e/scripts/gemmdiag.py 8192,5000,7000 6144,3000,9000 8192,8192,7168 8192,4968,7832 4096,4968,7832 10000,7000,3000 5000,6000,5000 2500,6000,5000 12000,5000,3500 > $R/gemmdiag.log 2>&1; echo "diag rc=$? at ${SECONDS}s"; cat $R/gemmdiag.log
timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_overlap.py --rounds 5 --shapes rs:8192,4968,7832 rs:10000,7000,3000 rs:5000,6000,5000 ag:8192,5000,7000 ag:6144,3000,9000 --out $R/overlap.json > $R/overlap.log 2>&1; echo "overlap rc=$? at ${SECONDS}s"; grep -v "^W1\|arn" $R/overlap.log | tail -14
for layout in sp replicated; do
  timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout $layout \
    --out $R/bench_inference_$layout.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_$layout.log
  echo "inference $layout rc=$? at ${SECONDS}s"; grep -E "decode|prefill" $R/bench_inference_$layout.log | tail -16
done
