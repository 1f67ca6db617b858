R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-28-h200x2/scripts/old  # git archive b3dadcd fluxlite | tar -x -C there (not kept here)
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 200 $P tests/test_world_sizes.py -k "at_every_gpu and (fused_shapes or gemm_ar or missing_peer)" > $R/shared.log 2>&1; tail -4 $R/shared.log; echo "shared at ${SECONDS}s"
timeout 120 $P tests/test_gpu_gemm_ar.py > $R/gemm_ar.log 2>&1; tail -3 $R/gemm_ar.log; echo "gemm_ar at ${SECONDS}s"
for code in old new; do
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site TAG=$code SH=8192x4096x8192,12001x1000x7880,16384x2048x4096 timeout 70 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_$code.log 2>&1
  echo "trace $code rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
S="--shape ar:64,8192,8192 --shape ar:256,8192,8192 --shape ar:1024,8192,8192 --shape ar:1000,7000,8000 --shape ar:600,5000,6000 --shape ar:8192,4096,8192 --shape ar:12001,1000,7880"
i=0
for code in new old new old; do
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 70 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused --rounds 5 --no-progress --out $R/prof_${i}_$code > $R/prof_${i}_$code.log 2>&1
  echo "prof $i $code rc=$? at ${SECONDS}s"
done
