R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-28-h200x2/scripts/old  # git archive b3dadcd fluxlite | tar -x -C there (not kept here)
SH=12001x1000x7880,8192x4096x8192,16384x2048x4096,8192x14336x8192,6000x5000x3000,3000x9000x6144
for rep in 1 2; do
for v in old:0 new:3 new:2; do
  IFS=: read code G <<< "$v"; TAG=$code$G
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site GPPS=$G TAG=$TAG SH=$SH timeout 45 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2/scripts/qtime.py 2>&1 | grep -v Warn | grep "us " | tee -a $R/qtime.log
  echo "$TAG at ${SECONDS}s"
done; done
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
timeout 120 $P tests/test_gpu_gemm_ar.py > $R/gemm_ar.log 2>&1; tail -3 $R/gemm_ar.log; echo "gemm_ar at ${SECONDS}s"
FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 100 $P tests/test_world_sizes.py -k "at_every_gpu and gemm_ar" > $R/shared.log 2>&1; tail -3 $R/shared.log; echo "shared at ${SECONDS}s"
S="--shape ar:64,8192,8192 --shape ar:256,8192,8192 --shape ar:1024,8192,8192 --shape ar:1000,7000,8000 --shape ar:8192,4096,8192 --shape ar:12001,1000,7880 --shape ar:8192,28672,8192 --shape ar:5000,3000,7000"
timeout 90 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused,auto --rounds 5 --no-progress --out $R/prof_new > $R/prof_new.log 2>&1; echo "prof rc=$? at ${SECONDS}s"
timeout 130 $P tests/test_gpu_safety.py -k "missing_peer_at_each_point" > $R/safety.log 2>&1; tail -3 $R/safety.log; echo "safety at ${SECONDS}s"
