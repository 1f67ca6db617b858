R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5"
timeout 250 $P tests/test_gpu_fused.py > $R/fused.log 2>&1; echo "fused: $(tail -1 $R/fused.log) at ${SECONDS}s"
timeout 120 $P tests/test_gpu_graphs.py > $R/graphs.log 2>&1; echo "graphs: $(tail -1 $R/graphs.log) at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site19 .whl_all/0.19.2/*.whl
PYTHONPATH=$PWD:/tmp/site19 timeout 90 $P tests/test_parallel_megatron.py > $R/megatron019.log 2>&1; echo "megatron 0.19.2: $(tail -1 $R/megatron019.log) at ${SECONDS}s"
PYTHONPATH=$PWD:/tmp/site19 python3 -c "import megatron.core as m; print('megatron-core', m.__version__)" >> $R/megatron019.log 2>&1; tail -1 $R/megatron019.log
