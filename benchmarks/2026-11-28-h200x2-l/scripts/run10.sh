R=/tmp/r8; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 benchmarks/2026-11-28-h200x2-l/scripts/hostcost.py > $R/hostcost.txt 2>&1; echo "rc=$?"; grep -v Warn $R/hostcost.txt
true
