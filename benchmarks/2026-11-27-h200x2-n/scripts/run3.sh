R=/tmp/r3; source benchmarks/2026-11-27-h200x2-n/scripts/common.sh; export R
F='^W1\|Warn\|warn\|\*\*\*\*\|OMP_NUM'
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=4"
timeout 150 $P tests/test_world_sizes.py -k several_gpus 2>&1 | tail -4 | tee $R/ws3.log; echo "ws3 at ${SECONDS}s"
FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 200 $P tests/test_world_sizes.py -k gemm_ar 2>&1 | tail -5 | tee $R/ws4.log; echo "ws4 at ${SECONDS}s"
timeout 150 $P tests/test_parallel_megatron.py 2>&1 | tail -4 | tee $R/meg.log; echo "meg at ${SECONDS}s"
timeout 160 $P tests/test_gpu_graphs.py 2>&1 | tail -6 | tee $R/graphs.log; echo "graphs at ${SECONDS}s"
i=0
for code in new old; do
  [ $SECONDS -gt 470 ] && break
  i=$((i+1)); PP=$PWD; [ $code = old ] && PP=$PWD/benchmarks/2026-11-27-h200x2-n/scripts/old:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/gpt_${i}_$code.json 2>&1 | grep -v "$F" > $R/gpt_${i}_$code.log
  echo "gpt $i $code rc=$? at ${SECONDS}s"; grep -A4 "  mode " $R/gpt_${i}_$code.log
done
