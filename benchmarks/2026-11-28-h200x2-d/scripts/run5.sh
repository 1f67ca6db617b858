R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
CUDA_VISIBLE_DEVICES=0,1 FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu_random.py -k "matmul_consumers or fused_ops" > $R/t/random.log 2>&1; echo "rc=$?"; tail -3 $R/t/random.log
