R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-27-h200x2-o/scripts/old  # git archive 23327fe fluxlite | tar -x -C benchmarks/2026-11-27-h200x2-o/scripts/old (not kept here)
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee $R/tests.log
echo "tests at ${SECONDS}s"
for code in old new; do
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site TAG=$code SH=8192x4096x8192,12001x1000x7880,8192x14336x8192,16384x2048x4096 timeout 80 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_$code.log 2>&1
  echo "trace $code rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:8192,5120,8192 --shape ar:8192,28672,8192 --shape ar:8192,16384,8192 --shape ar:12001,1000,7880 --shape ar:7368,6912,10336 --shape ar:3000,9000,6144 --shape ar:16384,2048,4096 --shape ar:6000,5000,3000"
i=0
for code in new old new old; do
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 100 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused --rounds 5 --no-progress --out $R/prof_${i}_$code > $R/prof_${i}_$code.log 2>&1
  echo "prof $i $code rc=$? at ${SECONDS}s"
done
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_safety.py -k missing_peer 2>&1 | tail -3 | tee -a $R/tests.log
echo "safety at ${SECONDS}s"
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "several_gpus or gemm_ar" 2>&1 | tail -3 | tee -a $R/tests.log
echo "world sizes at ${SECONDS}s"
