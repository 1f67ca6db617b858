#!/usr/bin/env bash
# GPU tests (scratch partials, event counts, graphs); auto at 16 shapes; graph replays base vs head.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res12c; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fused.py -k "recurring or replay or missing or growth" 2>&1 | tail -2 | tee -a $R/tests.log
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py tests/test_gpu_gemm_ar.py 2>&1 | tail -2 | tee -a $R/tests.log
A="ag:2,8192,4096 ag:48,5120,13824 ag:700,8192,3584 ag:2048,4096,11008 ag:5000,6144,6144 ag:16384,8192,5120 ag:512,8192,4096 ag:64,8192,14336
   ag:1536,5120,6912 rs:4,8192,5120 rs:300,11008,4096 rs:1024,4096,8192 rs:3000,7168,7168 rs:12288,9664,4160 rs:8192,14336,8192 rs:256,14336,8192"
timeout 150 python3 -m fluxlite.profile --tune $(for s in $A; do echo --shape $s; done) --nproc 2 --impls sequential,decomposed,fused,auto \
  --rounds 11 --time-limit 130 --no-progress --out $R/auto 2>&1 | grep -v '^W1' | grep -v measured > $R/auto.log; tail -1 $R/auto.log
for v in head base; do
  P=$PWD; [[ $v == base ]] && P=$PWD/.scratch/base
  PYTHONPATH=$P timeout 100 torchrun --standalone --nproc-per-node 2 $P/scripts/bench_graphs.py --rounds 3 --out $R/graphs_$v.json 2>&1 | grep -v '^W1' > $R/graphs_$v.log; tail -11 $R/graphs_$v.log | cut -c1-160
done
