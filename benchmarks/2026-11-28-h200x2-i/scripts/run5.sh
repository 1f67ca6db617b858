R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 43a8cf9: the one 64-bit bound helper on the GPU: the missing-peer cases at two ranks, four
# ranks on two GPUs (a missing peer, the SMs' small calls).
mkdir -p $R/tests
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "missing_peer or small_chunks" > $R/tests/fused.log 2>&1
  echo "fused missing_peer, small_chunks: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)" >> $R/summary.txt ) &
( t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py \
    -k "at_every_gpu and (missing_peer or small_chunks)" > $R/tests/shared4.log 2>&1
  echo "shared W=4 missing_peer, small_chunks: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
