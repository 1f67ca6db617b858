R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 560e12f with the padded GEMM's rule as fitted (OP_SECONDS 30 us; the code landed has 15 us).
# The padding rule as fitted: the sweep, the GPU tests, the profiler at twelve shapes off 16 bytes against
# the code without the padding (old: git archive 560e12f fluxlite | tar -x -C old; run from /tmp so that its fluxlite is imported).
git log --oneline -1 > $R/commit.txt 2>/dev/null
mkdir -p $R/tests
FLUXLITE_GPU_RANKS=2 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1
echo "whole_rows: rc=$? at ${SECONDS}s :: $(tail -1 $R/tests/whole.log)" | tee -a $R/summary.txt
timeout 100 python3 benchmarks/2026-11-28-h200x2-j/scripts/sweep.py > $R/sweep.txt 2>&1; echo "sweep rc=$? at ${SECONDS}s"; cat $R/sweep.txt
S="--shape ag:8192,5000,3500 --shape ag:6144,3000,4500 --shape rs:8192,4996,7000 --shape rs:6144,8192,3500 --shape ar:4096,3001,2000 --shape ag:5104,8016,7269 --shape ar:2048,4096,2001 --shape ag:4000,6007,2501 --shape rs:7000,3333,4444 --shape ar:3000,5555,1234 --shape ag:12000,4100,6001 --shape ag:8192,8192,14336"
FLUXLITE_CACHE_DIR=$R/cache timeout $((470 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --tune --time-limit $((455 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A13 'op, M x K' | head -14
H=$PWD; cd /tmp && PYTHONPATH=$H/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((580 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((565 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A13 'op, M x K' | head -14; grep -m3 "fluxlite.*commit\|Error" $R/prof_old.log
