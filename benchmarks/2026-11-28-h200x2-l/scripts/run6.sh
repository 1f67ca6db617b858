R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The copies between row pitches (fluxlite/kernels/repitch.py) in zero_padded and first_columns, GEMM-RS's weight
# padded for N and K in one copy: GPU tests; the copies against torch's (queued); fused calls' timelines; the profiler
# against f3c74f1 (head: git archive f3c74f1 fluxlite | tar -x -C head; from /tmp) in the same call.
git log --oneline -1 > $R/commit.txt 2>/dev/null; mkdir -p $R/tests
t0=$SECONDS; timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_repitch.py > $R/tests/repitch.log 2>&1
echo "repitch tests: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/repitch.log)" >> $R/summary.txt
t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py > $R/tests/whole.log 2>&1
echo "whole rows: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole.log)" >> $R/summary.txt; cat $R/summary.txt
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 benchmarks/2026-11-28-h200x2-l/scripts/repitch3.py > $R/repitch.txt 2>&1; echo "repitch bench rc=$? ${SECONDS}s"; grep -v Warn $R/repitch.txt | tail -17
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes rs:14634,11037,1804 rs:15646,13227,6639 --calls 6 > $R/trace.txt 2>&1; echo "trace rc=$? ${SECONDS}s"
grep -A3 "rank 0: throughput" $R/trace.txt | grep -v "^--"
S="--shape rs:14634,11037,1804 --shape rs:8192,4099,3001 --shape rs:15646,13227,6639 --shape rs:6000,5001,2999 --shape rs:10900,9104,8589 --shape rs:7540,11472,3173 --shape ag:12000,4100,6001 --shape ag:4000,6007,2501 --shape ar:4096,3001,2000 --shape ag:8192,8192,14336"
FLUXLITE_CACHE_DIR=$R/cache timeout 150 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 140 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A11 'op, M x K' | cut -c1-110
H=$PWD; cd /tmp && PYTHONPATH=$H/head:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout 150 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused --rounds 5 --time-limit 140 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A11 'op, M x K' | cut -c1-110
true
