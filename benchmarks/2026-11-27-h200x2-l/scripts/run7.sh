R=/tmp/r7; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_parallel_megatron.py tests/test_parallel_gpu.py 2>&1 | tail -6 | tee $R/tests016.log
echo "tests at ${SECONDS}s"
run() { timeout 150 torchrun --standalone --nproc-per-node 2 "$@" 2>&1 | grep -v 'Warning\|warn\|^W1127\|\*\*\*\*\|OMP_NUM' ; }
run scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp_a.json | tee $R/nosp_a.log
echo "gpt at ${SECONDS}s"
PYTHONPATH=benchmarks/2026-11-27-h200x2-l/scripts/old:$PYTHONPATH run scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp_old.json | tee $R/nosp_old.log
run scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp_b.json | tee $R/nosp_b.log
echo "done at ${SECONDS}s"
