R=/tmp/r11; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/tests
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_repitch.py > $R/tests/repitch.log 2>&1; echo "repitch: rc=$? :: $(tail -1 $R/tests/repitch.log)"
FLUXLITE_GPU_RANKS=2 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1; echo "whole rows: rc=$? :: $(tail -1 $R/tests/whole.log)"
true
