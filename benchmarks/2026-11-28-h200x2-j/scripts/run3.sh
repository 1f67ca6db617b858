R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 560e12f with the reference implementations' padded GEMM in its first form (one FLOP rate, 2 TB/s copies).
# Its second profile ran the checkout's code all the same (python -m puts the working folder first), so
# NOTES.md leaves it out.
# Padded GEMMs in the reference implementations: the rule's boundary, GPU tests, the profiler against the
# code before (other process, same call).
git log --oneline -1 > $R/commit.txt 2>/dev/null
timeout 100 python3 benchmarks/2026-11-28-h200x2-j/scripts/sweep.py > $R/sweep.txt 2>&1; echo "sweep rc=$? at ${SECONDS}s"; cat $R/sweep.txt
mkdir -p $R/tests
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_whole_rows.py tests/test_gpu_gemm_ar.py > $R/tests/whole.log 2>&1
  echo "whole_rows + gemm_ar: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/whole.log)" >> $R/summary.txt ) &
( t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py \
    -k "at_every_gpu and (missing_peer or small_chunks or fused_shapes or gemm_ar)" > $R/tests/shared4.log 2>&1
  echo "shared W=4: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt; echo "tests done at ${SECONDS}s"
S="--shape ag:8192,5000,3500 --shape ag:6144,3000,4500 --shape rs:8192,4996,7000 --shape rs:6144,8192,3500 --shape ar:4096,3001,2000 --shape ag:5104,8016,7269 --shape ar:2048,4096,2001 --shape ag:8192,8192,14336"
FLUXLITE_CACHE_DIR=$R/cache timeout $((440 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused,decomposed,auto --rounds 5 --tune --time-limit $((425 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A10 'op, M x K' | head -10
PYTHONPATH=$PWD/old:/tmp/site FLUXLITE_CACHE_DIR=$R/cache_old timeout $((575 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 5 --time-limit $((560 - SECONDS)) --no-progress --out $R/prof_old > $R/prof_old.log 2>&1
echo "prof old rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof_old.log | grep -A10 'op, M x K' | head -10
