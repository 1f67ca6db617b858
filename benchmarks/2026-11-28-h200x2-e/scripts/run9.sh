R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --calls 1 --seed 42 --out $R/graphs1.json > $R/graphs1.log 2>&1; echo "graphs1 rc=$? at ${SECONDS}s"; grep -v "^W1\|arn\|enable_symm" $R/graphs1.log | tail -9
timeout 150 python3 -m fluxlite.profile --shape ag:8192,5000,7000 --shape rs:5000,6000,5000 --shape ar:200,4104,3629 --shape ag:256,8192,2560 --nproc 2 --impls fused,auto --rounds 5 --time-limit 130 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A5 'op, M x K' | head -6
FLUXLITE_GPU_RANKS=2 timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu_graphs.py -k "captured_auto" > $R/auto.log 2>&1; echo "auto tests rc=$? at ${SECONDS}s"; tail -2 $R/auto.log
