R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
git archive 24b3ea1 fluxlite | (rm -rf /tmp/old && mkdir -p /tmp/old && tar x -C /tmp/old)  # the code before the rule change, for the A/B
FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu_graphs.py -k captured_auto > $R/captured_auto.log 2>&1; echo "captured_auto rc=$? $(tail -1 $R/captured_auto.log) at ${SECONDS}s"
S="--shape ar:200,4104,3629 --shape ar:4125,5143,2163 --shape ar:7,5000,2000 --shape ag:98,6932,5589 --shape rs:651,5488,6282 --shape ar:180,2514,7118 --shape ag:436,1135,5255 --shape rs:40,1864,4842"
FLUXLITE_CACHE_DIR=$R/cache_new timeout 260 python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --time-limit 240 --no-progress --out $R/prof_new > $R/prof_new.log 2>&1
echo "prof new rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_new.log | grep -A12 'op, M x K' | head -14
PYTHONPATH=$PWD//tmp/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout 120 python3 -m fluxlite.profile --shape ar:200,4104,3629 --shape ar:4125,5143,2163 --shape ar:7,5000,2000 --nproc 2 --impls fused,auto --rounds 5 --time-limit 100 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A6 'op, M x K' | head -8
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto --out $R/mlp.json > $R/mlp.log 2>&1; echo "mlp rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/mlp.log | tail -4
