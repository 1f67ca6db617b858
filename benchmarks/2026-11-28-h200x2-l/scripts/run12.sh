R=/tmp/r9; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The copy's first launch kept out of a CUDA graph's capture: its GPU tests (one, a fresh process capturing first).
mkdir -p $R/tests
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_repitch.py > $R/tests/repitch.log 2>&1
echo "repitch tests: rc=$? :: $(tail -1 $R/tests/repitch.log)"; grep -B5 -A30 "Error\|assert" $R/tests/repitch.log | head -60
true
