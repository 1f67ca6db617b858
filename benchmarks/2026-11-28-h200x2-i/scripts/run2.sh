R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at aa123ca with scripts/wave_cut.patch applied (the variant not kept): run from such a checkout.
# AG-GEMM's matmul consumer cut on whole waves: where the rule cuts (real heuristic), then GPU tests
# (the timeout fix among them), then the profiler old (HEAD before the cut) against new at the cut shapes.
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 benchmarks/2026-11-28-h200x2-i/scripts/lead_probe.py > $R/cut_shapes.txt 2> $R/lead_probe.log
cat $R/lead_probe.log; cat $R/cut_shapes.txt
echo "probe done at ${SECONDS}s"
mkdir -p /tmp/old2 && git archive aa123ca fluxlite scripts | tar -x -C /tmp/old2  # without the cut
UNTIL=250; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 210 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_fused.py \
    -k "small_chunks or missing_peer or anchor or thousand or recurring_eager or whole_waves" > $R/tests/fused.log 2>&1
  echo "fused subset: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)" >> $R/summary.txt ) &
lane tests/test_gpu_cublaslt.py:60 tests/test_gpu_random.py:170 &
wait
cat $R/summary.txt
echo "tests done at ${SECONDS}s"
SH=$(cat $R/cut_shapes.txt | cut -d' ' -f1-12)
timeout 120 python3 -m fluxlite.profile $SH --nproc 2 --impls fused --rounds 5 --no-progress --out $R/prof_new > $R/prof_new.log 2>&1; echo "new rc=$? at ${SECONDS}s"
PYTHONPATH=/tmp/old2:/tmp/site timeout 120 python3 -m fluxlite.profile $SH --nproc 2 --impls fused --rounds 5 --no-progress --out $R/prof_old > $R/prof_old.log 2>&1; echo "old rc=$? at ${SECONDS}s"
grep -v "^W1\|Warn\|warn" $R/prof_new.log | tail -25; grep -v "^W1\|Warn\|warn" $R/prof_old.log | tail -25
echo "done at ${SECONDS}s"
