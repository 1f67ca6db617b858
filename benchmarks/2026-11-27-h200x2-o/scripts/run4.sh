R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 110 $P tests/test_world_sizes.py -k gemm_ar 2>&1 | tail -4 | tee $R/ws4.log; echo "ws4 at ${SECONDS}s"
timeout 230 $P tests/test_gpu_safety.py 2>&1 | tail -6 | tee $R/safety.log; echo "safety at ${SECONDS}s"
