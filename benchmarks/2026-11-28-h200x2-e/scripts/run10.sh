R=/tmp/r8; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 60 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json > $R/mlp.log 2>&1; echo "mlp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/mlp.log | tail -3
timeout 115 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --rounds 5 --out $R/gpt_sp.json > $R/gpt_sp.log 2>&1; echo "gpt sp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/gpt_sp.log | tail -7
