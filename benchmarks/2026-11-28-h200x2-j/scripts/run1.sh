R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran with the checkout at 2dac2f8 plus the profiler's GEMM on whole 16-byte rows (91351b1).
# GPU check of align.arguments (the review's mend) and the profiler's GEMM on whole-16-byte rows.
git log --oneline -1 > $R/commit.txt 2>/dev/null
UNTIL=260; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "missing_peer or small_chunks or recurring_eager" > $R/tests/fused.log 2>&1
  echo "fused subset: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)" >> $R/summary.txt
  t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py \
    -k "at_every_gpu and (missing_peer or small_chunks or fused_shapes or gemm_ar)" > $R/tests/shared4.log 2>&1
  echo "shared W=4: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt ) &
lane tests/test_gpu_graphs.py:180 &
wait
cat $R/summary.txt; echo "tests done at ${SECONDS}s"
timeout $((585 - SECONDS)) python3 -m fluxlite.profile --shape ag:8192,5000,3500 --shape ag:6144,3000,4500 --shape rs:8192,4996,7000 \
  --shape rs:6144,8192,3500 --shape ar:4096,3001,2000 --shape ag:5104,8016,7269 --shape rs:15646,13227,6639 --shape ag:8192,8192,14336 \
  --nproc 2 --impls fused --rounds 5 --time-limit $((570 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A12 'op, M x K' | head -14
