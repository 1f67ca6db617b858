R=/tmp/r1; source benchmarks/2026-11-27-h200x2-n/scripts/common.sh; export R
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee $R/tests.log
echo "tests at ${SECONDS}s"
for code in old new; do
  PP=$PWD; [ $code = old ] && PP=$PWD/benchmarks/2026-11-27-h200x2-n/scripts/old:$PWD
  PYTHONPATH=$PP:/tmp/site TAG=$code SH=8192x4096x8192,12001x1000x7880 timeout 70 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_$code.log 2>&1
  echo "trace $code rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:8192,5120,8192 --shape ar:8192,28672,8192 --shape ar:8192,16384,8192 --shape ar:12001,1000,7880 --shape ar:7368,6912,10336 --shape ar:3000,9000,6144 --shape ar:16384,2048,4096 --shape ar:5555,3333,7777"
i=0
for code in old new old new; do
  [ $SECONDS -gt 480 ] && break
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$PWD/benchmarks/2026-11-27-h200x2-n/scripts/old:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 110 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused --rounds 5 --no-progress --out $R/prof_${i}_$code > $R/prof_${i}_$code.log 2>&1
  echo "prof $i $code rc=$? at ${SECONDS}s"
done
