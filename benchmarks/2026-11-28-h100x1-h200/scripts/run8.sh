R=/tmp/r8; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt
(CUDA_VISIBLE_DEVICES=0,1 FLUXLITE_GPU_RANKS=2 FLUXLITE_RANDOM_CASES=30 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_random.py -k "fused_ops" > $R/random.log 2>&1; echo "random rc=$?: $(tail -1 $R/random.log)") &
(CUDA_VISIBLE_DEVICES=2,3 FLUXLITE_GPU_RANKS=2 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "plain_kernel or unfused or anchor" > $R/fused.log 2>&1; echo "fused rc=$?: $(tail -1 $R/fused.log)") &
wait
echo "at ${SECONDS}s"
