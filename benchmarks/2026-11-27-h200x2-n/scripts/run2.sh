R=/tmp/r2; source benchmarks/2026-11-27-h200x2-n/scripts/common.sh; export R
for cfg in 4:4 2:4 2:8 3:8 4:8; do
  PS=${cfg%%:*}; PPS=${cfg##*:}
  PUSH_SHARE=$PS PPS=$PPS TAG=s${PS}p${PPS} SH=8192x4096x8192,12001x1000x7880 timeout 70 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_$PS_$PPS.log 2>&1
  echo "trace $cfg rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_safety.py 2>&1 | tail -14 | tee $R/safety.log
echo "safety at ${SECONDS}s"
