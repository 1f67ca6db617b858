R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 560e12f with the padded GEMM as landed, and GEMM-RS's fused call on whole output rows (rs_whole_rows.patch,
# here without its pays_to_pad gate: every call with N off 8 and K whole padded).
# GEMM-RS fused on whole output rows: GPU tests, the profiler at GEMM-RS shapes with N off 16 bytes against
# 560e12f (old: git archive 560e12f fluxlite | tar -x -C old; run from /tmp), the rule's sweep with OP_SECONDS 15 us.
git log --oneline -1 > $R/commit.txt 2>/dev/null
UNTIL=230; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_whole_rows.py:60 tests/test_gpu_random.py:170 &
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "anchor or recurring or gemm_rs or reallocated" > $R/tests/fused_rs.log 2>&1
  echo "fused rs/recurring: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused_rs.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt; echo "tests done at ${SECONDS}s"
timeout 40 python3 benchmarks/2026-11-28-h200x2-j/scripts/sweep.py > $R/sweep.txt 2>&1; echo "sweep rc=$? at ${SECONDS}s"; grep -E "M=(256|512|1024)" $R/sweep.txt
S="--shape rs:6144,8192,3500 --shape rs:7000,3336,4444 --shape rs:15646,13232,6639 --shape rs:9000,4096,2001 --shape rs:16384,8192,1500 --shape rs:8192,4996,7000"
FLUXLITE_CACHE_DIR=$R/cache timeout $((450 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused,auto --rounds 5 --tune --time-limit $((435 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A7 'op, M x K' | head -8
H=$PWD; cd /tmp && PYTHONPATH=$H/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((540 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((525 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A7 'op, M x K' | head -8
true
