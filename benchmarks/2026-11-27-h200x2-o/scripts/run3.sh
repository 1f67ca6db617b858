R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-27-h200x2-o/scripts/old  # git archive 23327fe fluxlite | tar -x -C benchmarks/2026-11-27-h200x2-o/scripts/old (not kept here)
S="--shape ar:8192,4096,8192 --shape ar:8192,14336,8192 --shape ar:12001,1000,7880 --shape ar:16384,2048,4096 --shape ar:7368,6912,10336 --shape ar:3000,9000,6144"
i=0
for t in 4,3,1 1,3,3,1 1,4,2,1 4,3,1 1,3,3,1; do
  i=$((i+1))
  TAPER=$t timeout 70 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-o/scripts/prof_taper.py $S --impls sequential,fused --rounds 5 --no-progress --out $R/taper_${i}_${t//,/} > $R/taper_${i}_${t//,/}.log 2>&1
  echo "taper $i $t rc=$? at ${SECONDS}s"
done
for code in new old; do
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/gpt_$code.json > $R/gpt_$code.log 2>&1
  echo "gpt $code rc=$? at ${SECONDS}s"
done
for code in old new; do
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  CUDA_DEVICE_MAX_CONNECTIONS=1 PYTHONPATH=$PP:/tmp/site TAG=cdmc1$code SH=8192x4096x8192,12001x1000x7880 timeout 80 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-27-h200x2-n/scripts/trace_end.py > $R/t_cdmc1$code.log 2>&1
  echo "trace cdmc1 $code rc=$? at ${SECONDS}s"
done
gzip $R/tr_*.json
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py 2>&1 | tail -3 | tee -a $R/tests.log
echo "graphs at ${SECONDS}s"
[ $SECONDS -lt 450 ] && FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k gemm_ar 2>&1 | tail -3 | tee -a $R/tests.log
echo "ws4 at ${SECONDS}s"
[ $SECONDS -lt 480 ] && timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron.py 2>&1 | tail -3 | tee -a $R/tests.log
echo "megatron at ${SECONDS}s"
