R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu_fused.py -k "auto_by_the_rule" > $R/t/rule.log 2>&1; echo "rule rc=$? at ${SECONDS}s"; tail -3 $R/t/rule.log
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_sp.json > $R/gpt_sp.log 2>&1; echo "gpt sp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt_sp.log | tail -8
timeout 130 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --ceiling --out $R/gpt_nosp.json > $R/gpt_nosp.log 2>&1; echo "gpt nosp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt_nosp.log | tail -10
timeout 120 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json > $R/mlp.log 2>&1; echo "mlp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/mlp.log | tail -10
timeout $((560 - SECONDS)) python3 -m fluxlite.profile --shape ag:8192,5000,7000 --shape rs:8192,4968,7832 --shape rs:10000,7000,3000 --shape ag:6144,3000,9000 --shape rs:5000,6000,5000 \
  --nproc 2 --impls fused,auto --rounds 5 --time-limit $((545 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A8 'op, M x K' | head -10
