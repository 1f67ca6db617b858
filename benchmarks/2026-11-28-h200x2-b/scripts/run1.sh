R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
for f in tests/test_gpu_gemm_ar.py tests/test_gpu_fused.py tests/test_gpu_random.py; do
  n=$(basename $f .py); timeout 150 $P $f > $R/$n.log 2>&1; echo "$n: $(tail -1 $R/$n.log) at ${SECONDS}s"
done
timeout 100 $P tests/test_gpu_safety.py -k missing_peer_at_each_point > $R/safety.log 2>&1; echo "safety: $(tail -1 $R/safety.log) at ${SECONDS}s"
for i in 1 2 3; do
  SH=8192x14336x8192,8192x28672x8192,8192x4096x8192 TAG=p$i timeout 90 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-b/scripts/trace_ar.py > $R/trace$i.log 2>&1; echo "trace $i rc=$? at ${SECONDS}s"
done
