R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
for mb in 8 32; do
  MB=$mb timeout 60 torchrun --standalone --nproc-per-node 4 benchmarks/2026-11-28-h200x4/scripts/bw.py 2>&1 | grep '^W=' | tee -a $R/bw.log
  CUDA_VISIBLE_DEVICES=0,1 MB=$mb timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x4/scripts/bw.py 2>&1 | grep '^W=' | tee -a $R/bw.log
done
echo "bw at ${SECONDS}s"
timeout 150 python3 -m fluxlite.profile --model qwen2.5-72b --tokens 8192 --nproc 4 --ops ag,rs,ar --impls fused,torch_symm_mem \
  --rounds 7 --time-limit 130 --no-progress --out $R/tp4_qwen72b_8192 > $R/tp4_qwen72b_8192.log 2>&1
echo "profile rc=$? at ${SECONDS}s"; grep -v '^W1' $R/tp4_qwen72b_8192.log | grep -A20 'op, M x K'  | head -16
timeout 120 python3 -m fluxlite.profile --nproc 4 --shape ar:1,4096,8192 --shape ar:16,8192,8192 --shape ar:64,3584,8192 \
  --shape ar:256,7168,8192 --shape ar:2048,4096,8192 --impls fused,auto --tune --rounds 9 --time-limit 100 --no-progress \
  --out $R/tp4_ar > $R/tp4_ar.log 2>&1
echo "ar rc=$? at ${SECONDS}s"; grep -v '^W1' $R/tp4_ar.log | grep -A8 'op, M x K'
