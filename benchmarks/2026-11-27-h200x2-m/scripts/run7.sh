# 226d00f: GPU tests of the layers (Megatron, no SP among them), graphs and safety, each bounded;
# bench_gpt.py --no-sequence-parallel old (52cd55f, first on PYTHONPATH), then new
R=/tmp/r7; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh; export R
for f in tests/test_parallel_megatron.py tests/test_gpu_graphs.py tests/test_gpu_safety.py; do
  timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=2 $f 2>&1 | tail -4 | tee -a $R/tests.log
done
i=0
for code in old new; do
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$PWD/benchmarks/2026-11-27-h200x2-m/scripts/old:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 75 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/gpt_${i}_$code.json > $R/gpt_${i}_$code.log 2>&1
done
