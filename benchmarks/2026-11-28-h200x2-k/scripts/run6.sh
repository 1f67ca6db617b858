R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 0867fa5 with the change to pad_for_tma (fluxlite/ops/op.py) as landed after it.
# The fused kernels' K padding by one copy with only the padding zeroed (zero_padded) in place of
# torch.nn.functional.pad (a zero fill, then the copy): the padding's GPU tests, then fused at six shapes with
# K off 8 against 0867fa5 (head: git archive 0867fa5 fluxlite | tar -x -C head; from /tmp), alternating.
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1
echo "whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole.log)" >> $R/summary.txt; cat $R/summary.txt
S="--shape ag:4000,6007,2501 --shape ag:12000,4100,6001 --shape ag:8192,3001,4096 --shape rs:14634,11037,1804 --shape rs:8192,4099,3001 --shape rs:8192,4099,4096"
FLUXLITE_CACHE_DIR=$R/cache timeout 110 python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit 100 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A7 'op, M x K' | head -8
H=$PWD; cd /tmp && PYTHONPATH=$H/head:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout 110 python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit 100 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A7 'op, M x K' | head -8
true
