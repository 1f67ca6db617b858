R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt
timeout 200 python3 benchmarks/2026-11-28-h100x1-h200/scripts/kpad.py $R/kpad.json 2>&1 | tee $R/kpad.log | tail -14
echo "kpad at ${SECONDS}s"
