R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -s -p no:cacheprovider --durations=0"
timeout 200 $P tests/test_gpu_safety.py -k replayed_from_graphs > $R/replayed_new.log 2>&1; rc=$?
echo "replayed new rc=$rc at ${SECONDS}s"; tail -5 $R/replayed_new.log
timeout 170 $P tests/test_gpu_safety.py -k "recovery or mismatch" > $R/safety_rest.log 2>&1; echo "rest rc=$? at ${SECONDS}s"; tail -8 $R/safety_rest.log
timeout $((575 - SECONDS)) $P tests/test_parallel_gpu.py > $R/parallel_gpu.log 2>&1; echo "parallel rc=$? at ${SECONDS}s"; tail -8 $R/parallel_gpu.log
