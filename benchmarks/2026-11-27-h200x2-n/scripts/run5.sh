R=/tmp/r5; source benchmarks/2026-11-27-h200x2-n/scripts/common.sh; export R
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_safety.py -k missing_peer_at_each_point 2>&1 | tail -3 | tee $R/safety.log
echo "safety at ${SECONDS}s"
timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py 2>&1 | tail -3 | tee $R/gemm_ar.log
echo "gemm_ar at ${SECONDS}s"
