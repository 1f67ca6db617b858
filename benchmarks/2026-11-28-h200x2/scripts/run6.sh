R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus4.txt | wc -l
FLUXLITE_GPU_RANKS=4 timeout 175 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_world_sizes.py -k "at_every_gpu and (fused_shapes or gemm_ar or missing_peer)" > $R/w4.log 2>&1; echo "rc=$?"; tail -12 $R/w4.log
