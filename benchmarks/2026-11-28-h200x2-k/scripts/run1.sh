R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran with a variant that padded AG-GEMM's output rows too (Op.whole_output_rows for both ops; not kept, NOTES.md).
# old: git archive b4c793c fluxlite | tar -x -C old
# Whole output rows for AG-GEMM and GEMM-RS fused (Op.whole_output_rows): random GPU tests alone, then the
# padding's tests, then the profiler at N off 8 against b4c793c (old, run from /tmp).
git log --oneline -1 > $R/commit.txt 2>/dev/null
UNTIL=270; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_gpu_random.py:265
cat $R/summary.txt; echo "random done at ${SECONDS}s"
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "small_gemm_rs or recurring_eager" > $R/tests/fused_rs.log 2>&1
  echo "fused one-shot/recurring: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_rs.log)" >> $R/summary.txt ) &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1
  echo "whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt; echo "tests done at ${SECONDS}s"
S="--shape ag:8192,5000,3500 --shape ag:6144,3000,4500 --shape ag:12000,4096,6001 --shape ag:16384,8192,3501 --shape rs:6144,8192,3500 --shape rs:9000,4096,2001"
FLUXLITE_CACHE_DIR=$R/cache timeout $((500 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --tune --time-limit $((490 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A8 'op, M x K' | head -9
S="--shape ag:8192,5000,3500 --shape ag:6144,3000,4500 --shape ag:12000,4096,6001 --shape ag:16384,8192,3501"
H=$PWD; cd /tmp && PYTHONPATH=$H/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((585 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((575 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A6 'op, M x K' | head -7
true
