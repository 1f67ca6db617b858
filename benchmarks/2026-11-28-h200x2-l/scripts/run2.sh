R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/2026-11-28-h200x2-l/scripts/repitchbench.py > $R/repitch.txt 2>&1; echo "rc=$? ${SECONDS}s"; grep -v Warn $R/repitch.txt | tail -12
true
