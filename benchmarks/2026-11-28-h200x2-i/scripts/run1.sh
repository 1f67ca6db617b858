R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# Ran at 44f3988. Cut GEMMs against whole waves (GPU 0), then the bounded go wait of the SMs' gather on the GPU:
# its tests, W=4 shared, and small AG calls against the code before it.
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/2026-11-28-h200x2-i/scripts/waves.py 2>&1 | tee $R/waves.log
echo "waves done at ${SECONDS}s"
mkdir -p /tmp/old1 && git archive 6dfaff1 fluxlite scripts | tar -x -C /tmp/old1  # the code before the bounded go wait
UNTIL=440; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
( t0=$SECONDS; FLUXLITE_GPU_RANKS=2 timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=8 tests/test_gpu_fused.py \
    -k "small_chunks or missing_peer or recurring_eager or first_call" > $R/tests/fused.log 2>&1
  echo "fused subset: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/fused.log)" >> $R/summary.txt ) &
lane tests/test_gpu_graphs.py:180 &
( t0=$SECONDS; FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_world_sizes.py \
    -k "at_every_gpu and (fused_shapes or missing_peer)" > $R/tests/shared4.log 2>&1
  echo "shared W=4: rc=$? $((SECONDS - t0))s :: $(tail -1 $R/tests/shared4.log)" >> $R/summary.txt ) &
wait
cat $R/summary.txt
echo "tests done at ${SECONDS}s"
S="ag:8,8192,28672 ag:8,8192,5120 ag:64,8192,28672"
timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee $R/small_new.log
PYTHONPATH=/tmp/old1:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-h/scripts/small_ag.py $S 2>&1 | grep "^ag" | tee $R/small_old.log
echo "done at ${SECONDS}s"
