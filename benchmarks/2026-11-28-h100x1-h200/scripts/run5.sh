R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L | tee $R/gpus_all.txt; nvidia-smi topo -m > $R/topo.txt 2>&1
git log --oneline -1 > $R/head.txt 2>/dev/null; git diff --stat >> $R/head.txt 2>/dev/null
ACTS=gelu timeout 200 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h100x1-h200/scripts/act.py $R/act.json 2>&1 | grep -v "^W1\|Warning\|warn\|return func" | tee $R/act.log | tail -12
echo "act at ${SECONDS}s"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_epilogue.py > $R/test_gpu_epilogue.log 2>&1; echo "epilogue rc=$?: $(tail -1 $R/test_gpu_epilogue.log)"
echo "tests at ${SECONDS}s"
