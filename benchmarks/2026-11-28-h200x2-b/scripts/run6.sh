R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5"
timeout 200 $P tests/test_gpu_fused.py tests/test_gpu_graphs.py -k "peer_views_and_flags or unfused_impls_on_gpus or plain_kernel_matches_cublas or captured_auto_call_and_eager" > $R/rest.log 2>&1; echo "rest: $(tail -1 $R/rest.log) at ${SECONDS}s"
