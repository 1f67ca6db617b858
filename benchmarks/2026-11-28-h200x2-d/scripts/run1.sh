R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
N=$(nvidia-smi -L | wc -l)
mkdir -p $R/t
if [ "$N" -ge 4 ]; then
  ( CUDA_VISIBLE_DEVICES=3 FLUXLITE_GPU_SHARE=1 timeout 470 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_fused.py > $R/t/fused.log 2>&1; echo "fused rc=$? at ${SECONDS}s" >> $R/t/rc.log ) &
  ( CUDA_VISIBLE_DEVICES=2 FLUXLITE_GPU_SHARE=1 timeout 300 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_safety.py > $R/t/safety.log 2>&1; echo "safety rc=$? at ${SECONDS}s" >> $R/t/rc.log
    CUDA_VISIBLE_DEVICES=2 FLUXLITE_GPU_SHARE=1 timeout $((470 - SECONDS)) python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_random.py > $R/t/random.log 2>&1; echo "random rc=$? at ${SECONDS}s" >> $R/t/rc.log ) &
fi
export CUDA_VISIBLE_DEVICES=0,1
for layout in sp replicated; do
  timeout 170 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout $layout \
    --out $R/bench_inference_$layout.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_$layout.log
  echo "inference $layout rc=$? at ${SECONDS}s"; tail -14 $R/bench_inference_$layout.log
done
timeout $((460 - SECONDS)) python3 -m fluxlite.profile --shape ag:16,8192,2560 --shape ag:256,8192,2560 --shape ag:512,4096,4096 --shape rs:64,8192,8192 --shape rs:512,3584,8192 --nproc 2 --impls fused,torch_symm_mem,auto --rounds 5 --time-limit $((440 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A9 'op, M x K' | head -12
wait
cat $R/t/rc.log; for f in $R/t/*.log; do echo "== $f"; tail -4 $f; done
