R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
timeout 100 $P tests/test_gpu_gemm_ar.py > $R/gemm_ar.log 2>&1; tail -1 $R/gemm_ar.log; echo "gemm_ar at ${SECONDS}s"
FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 60 $P tests/test_world_sizes.py -k "at_every_gpu and gemm_ar" > $R/shared.log 2>&1; tail -1 $R/shared.log; echo "shared at ${SECONDS}s"
S="--shape ar:64,8192,8192 --shape ar:256,8192,8192 --shape ar:1024,8192,8192 --shape ar:1000,7000,8000 --shape ar:8192,4096,8192 --shape ar:12001,1000,7880 --shape ar:8192,28672,8192 --shape ar:5000,3000,7000"
timeout 90 python3 -m fluxlite.profile --nproc 2 $S --impls sequential,fused,auto --rounds 5 --no-progress --out $R/prof_new2 > $R/prof_new2.log 2>&1; echo "prof rc=$? at ${SECONDS}s"
