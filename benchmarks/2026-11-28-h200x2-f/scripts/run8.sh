R=/tmp/r8; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
FLUXLITE_GPU_RANKS=2 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py > $R/gpu_graphs.log 2>&1; echo "test_gpu_graphs rc=$? $(tail -1 $R/gpu_graphs.log) at ${SECONDS}s"
FLUXLITE_GPU_RANKS=2 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k auto > $R/gpu_fused_auto.log 2>&1; echo "test_gpu_fused -k auto rc=$? $(tail -1 $R/gpu_fused_auto.log) at ${SECONDS}s"
timeout 130 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --rounds 5 --out $R/gpt_sp.json > $R/gpt_sp.log 2>&1; echo "gpt sp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt_sp.log | tail -5
