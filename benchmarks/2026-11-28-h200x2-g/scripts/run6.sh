R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 110 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/sweep.py 5 ag 2>&1 | grep -v "^W1\|FutureWarning\|enable_symm\|warn" | tee $R/sweep.log | grep "^ag" | sed 's/ host [0-9.]*//g'
echo "sweep at ${SECONDS}s"
timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-g/scripts/decode_ctx.py 256 sp 2>&1 | grep -v "^W1\|FutureWarning\|enable_symm\|warn" | tee $R/decode_ctx.log | grep -v "^\[rank"
echo "ctx at ${SECONDS}s"
FLUXLITE_GPU_RANKS=2 timeout $((235 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "small_chunks" 2>&1 | tail -2 | tee $R/test.log
echo "done at ${SECONDS}s"
