R=/tmp/r4; source benchmarks/2026-11-27-h200x2-n/scripts/common.sh; export R
for cfg in 4:4:4096 4:4:8192 4:4:16384 3:4:8192 4:2:8192 4:4:4096; do
  IFS=: read PS PPS GB <<< "$cfg"
  PUSH_SHARE=$PS PPS=$PPS GBLOCK=$GB TAG=s${PS}p${PPS}b${GB}_$SECONDS SH=8192x4096x8192,12001x1000x7880 timeout 70 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_$PS_$PPS_$GB.log 2>&1
  echo "trace $cfg rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
timeout 230 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=6 tests/test_gpu_random.py 2>&1 | tail -10 | tee $R/random.log
echo "random at ${SECONDS}s"
