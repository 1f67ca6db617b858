R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --calls 1 --seed 42 --out $R/graphs1.json > $R/graphs1.log 2>&1; echo "graphs1 rc=$? at ${SECONDS}s"; grep -v "^W1\|arn" $R/graphs1.log | tail -14
timeout 110 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --rounds 6 --out $R/gpt8b_sp.json > $R/gpt8b_sp.log 2>&1; echo "gpt8b sp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt8b_sp.log | tail -8
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --rounds 6 --no-sequence-parallel --ceiling --out $R/gpt8b_nosp.json > $R/gpt8b_nosp.log 2>&1; echo "gpt8b nosp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt8b_nosp.log | tail -10
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site19 .whl_all/0.19.2/*.whl
PYTHONPATH=$PWD:/tmp/site19 FLUXLITE_GPU_RANKS=2 timeout $((540 - SECONDS)) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron.py > $R/megatron019.log 2>&1; echo "megatron 0.19.2 rc=$? $(tail -1 $R/megatron019.log) at ${SECONDS}s"
PYTHONPATH=$PWD:/tmp/site19 python3 -c "import megatron.core as m; print('megatron-core', m.__version__)" 2>&1 | tail -1
