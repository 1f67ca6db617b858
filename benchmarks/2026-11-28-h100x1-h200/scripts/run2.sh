R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee $R/env.txt
timeout 150 python3 benchmarks/2026-11-28-h100x1-h200/scripts/lt_rule.py $R/lt_rule.json 2>&1 | tee $R/lt_rule.log | tail -50
echo "lt at ${SECONDS}s"
timeout 150 python3 scripts/bench_gemm.py --out $R/bench_gemm.json --shapes 8192,8192,14336 8192,14336,8192 4096,28672,4096 16384,4096,8192 6144,14336,8192 3184,15480,14920 16352,13816,2144 8192,5000,7000 12000,8192,5504 6000,7000,10000 10000,7000,3000 8192,4968,7832 2>&1 | tee $R/bench_gemm.log | tail -40
echo "gemm at ${SECONDS}s"
for f in tests/test_gpu_cublaslt.py tests/test_gpu_gemm_ar.py; do
  FLUXLITE_GPU_SHARE=1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider $f > $R/$(basename $f .py).log 2>&1; echo "$f rc=$?: $(tail -1 $R/$(basename $f .py).log)"
done
echo "tests at ${SECONDS}s"
