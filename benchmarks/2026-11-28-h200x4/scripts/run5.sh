R=/tmp/r5; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
export FLUXLITE_GPU_RANKS=2
( export CUDA_VISIBLE_DEVICES=0,1; for f in tests/test_gpu_fused.py; do
  n=$(basename $f .py); timeout 330 $P $f > $R/$n.log 2>&1; echo "$n: $(tail -1 $R/$n.log) at ${SECONDS}s"; done ) &
( export CUDA_VISIBLE_DEVICES=2,3; for f in tests/test_gpu_safety.py tests/test_gpu_epilogue.py tests/test_gpu_cublaslt.py; do
  n=$(basename $f .py); timeout $((325 - SECONDS)) $P $f > $R/$n.log 2>&1; echo "$n: $(tail -1 $R/$n.log) at ${SECONDS}s"; done ) &
wait
export FLUXLITE_GPU_RANKS=4
timeout 100 $P tests/test_world_sizes.py -k at_every_gpu > $R/w4.log 2>&1; echo "w4: $(tail -1 $R/w4.log) at ${SECONDS}s"
unset FLUXLITE_GPU_RANKS
timeout $((575 - SECONDS)) python3 -m fluxlite.profile --model llama3-8b --tokens 8192 --nproc 4 --ops ag,rs,ar --impls fused,torch_symm_mem \
  --rounds 7 --time-limit $((550 - SECONDS)) --no-progress --out $R/tp4_llama8b_8192 > $R/tp4_llama8b_8192.log 2>&1
echo "profile rc=$? at ${SECONDS}s"; grep -v '^W1' $R/tp4_llama8b_8192.log | grep -A13 'op, M x K'
