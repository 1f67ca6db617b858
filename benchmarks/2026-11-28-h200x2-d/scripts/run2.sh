R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
N=$(nvidia-smi -L | wc -l)
mkdir -p $R/t
if [ "$N" -ge 4 ]; then
  ( CUDA_VISIBLE_DEVICES=2 FLUXLITE_GPU_SHARE=1 timeout 500 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_fused.py > $R/t/fused.log 2>&1; echo "fused rc=$? at ${SECONDS}s" >> $R/t/rc.log ) &
  ( CUDA_VISIBLE_DEVICES=3 FLUXLITE_GPU_SHARE=1 timeout 200 python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_gemm_ar.py > $R/t/gemm_ar.log 2>&1; echo "gemm_ar rc=$? at ${SECONDS}s" >> $R/t/rc.log
    CUDA_VISIBLE_DEVICES=3 FLUXLITE_GPU_SHARE=1 timeout $((500 - SECONDS)) python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/test_gpu_random.py > $R/t/random.log 2>&1; echo "random rc=$? at ${SECONDS}s" >> $R/t/rc.log ) &
fi
export CUDA_VISIBLE_DEVICES=0,1
timeout 300 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-d/scripts/sweep.py 5 2>&1 | grep -v '^W1\|Warning\|warn\|enable_symm' > $R/sweep.log
echo "sweep rc=$? at ${SECONDS}s"; cat $R/sweep.log | tail -30
timeout $((490 - SECONDS)) torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout sp \
    --out $R/bench_inference_sp.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_sp.log
echo "inference rc=$? at ${SECONDS}s"; tail -22 $R/bench_inference_sp.log
wait
cat $R/t/rc.log; for f in $R/t/*.log; do echo "== $f"; tail -5 $f; done
