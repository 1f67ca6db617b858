R=/tmp/r8; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site19 .whl_all/0.19.2/*.whl
export PYTHONPATH=$PWD:/tmp/site19
python3 -c "import megatron.core as m, sys; print('megatron-core', m.__version__, sys.version.split()[0])" | tee $R/mcore.txt
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron.py 2>&1 | tail -3 | tee $R/tests019.log
echo "tests at ${SECONDS}s"
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp19.json 2>&1 | grep -v 'Warning\|warn\|^W1127\|\*\*\*\*\|OMP_NUM' | tee $R/nosp19.log
echo "done at ${SECONDS}s"
