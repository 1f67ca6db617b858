R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
N=$(nvidia-smi -L | wc -l)
mkdir -p $R/t
t() { CUDA_VISIBLE_DEVICES=$1 FLUXLITE_GPU_SHARE=1 timeout $2 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/$3.py > $R/t/$3.log 2>&1; echo "$3 rc=$? at ${SECONDS}s" >> $R/t/rc.log; }
if [ "$N" -ge 4 ]; then
  ( t 2 340 test_gpu_fused; t 2 $((430 - SECONDS)) test_gpu_gemm_ar ) &
  ( t 3 250 test_gpu_safety; t 3 $((430 - SECONDS)) test_gpu_graphs ) &
fi
export CUDA_VISIBLE_DEVICES=0,1
timeout 200 python3 -m fluxlite.profile --shape ag:16,8192,2560 --shape ag:256,8192,2560 --shape ag:1000,3000,5000 --shape ag:2048,4096,4096 --shape ag:520,5120,3456 \
  --shape rs:16,7168,8192 --shape rs:256,8192,8192 --shape rs:1000,3000,5000 --shape rs:2048,4096,4096 --shape rs:600,3584,6000 --shape rs:4096,3584,8192 \
  --nproc 2 --impls fused,torch_symm_mem,auto --rounds 5 --time-limit 180 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A13 'op, M x K' | head -14
for layout in sp replicated; do
  timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout $layout \
    --out $R/bench_inference_$layout.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_$layout.log
  echo "inference $layout rc=$? at ${SECONDS}s"; grep -E "decode|prefill" $R/bench_inference_$layout.log | tail -20
done
wait
cat $R/t/rc.log; for f in $R/t/*.log; do echo "== $f"; tail -4 $f; done
