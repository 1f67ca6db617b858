R=/tmp/r10; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/2026-11-28-h200x2-l/scripts/noguard.py > $R/noguard.txt 2>&1; echo "rc=$?"; grep -v Warn $R/noguard.txt | tail -12
true
