R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt
timeout 240 python3 benchmarks/2026-11-28-h100x1-h200/scripts/actcore.py $R/actcore.json 2>&1 | tee $R/actcore.log | tail -26
echo "act at ${SECONDS}s"
