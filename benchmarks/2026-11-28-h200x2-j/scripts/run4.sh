R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 560e12f with the padded GEMM's rule of run 3 (parts.py times the padding's parts).
# One GPU (nvidia-h200).
git log --oneline -1 > $R/commit.txt 2>/dev/null
timeout 150 python3 benchmarks/2026-11-28-h200x2-j/scripts/parts.py > $R/parts.txt 2>&1; echo "parts rc=$? at ${SECONDS}s"; cat $R/parts.txt
