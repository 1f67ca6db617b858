# the tapered splits (226d00f) against 52cd55f (old, first on PYTHONPATH)
R=/tmp/r6; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee $R/tests.log
i=0
for code in new old new; do
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$PWD/benchmarks/2026-11-27-h200x2-m/scripts/old:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/gpt_${i}_$code.json > $R/gpt_${i}_$code.log 2>&1
done
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:8192,5120,8192 --shape ar:8192,28672,8192 --shape ar:8192,16384,8192 --shape ar:12001,1000,7880 --shape ar:7368,6912,10336"
timeout 110 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused --rounds 7 --no-progress --out $R/prof > $R/prof.log 2>&1
