#!/usr/bin/env bash
# Replays of one-call graphs against eager calls; the decoder stack in both decode layouts;
# GEMM-AllReduce at decode and training sizes with auto; the GPTModel step without sequence parallelism.
R=/tmp/res22d; source .scratch/s22/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
timeout 80 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 5 --calls 1 --out $R/bench_graphs_1.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_graphs_1.log; echo "graphs rc=$? at ${SECONDS}s"; tail -8 $R/bench_graphs_1.log
for layout in sp replicated; do
  timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --decode-layout $layout \
    --out $R/bench_inference_$layout.json 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bench_inference_$layout.log
  echo "inference $layout rc=$? at ${SECONDS}s"; tail -12 $R/bench_inference_$layout.log
done
export FLUXLITE_CACHE_DIR=$R/cache
AR="--shape ar:1,14336,8192 --shape ar:8,4096,8192 --shape ar:40,11008,4096 --shape ar:64,14336,8192 --shape ar:130,7000,5000 --shape ar:256,4096,8192 --shape ar:2048,8192,8192 --shape ar:3000,5000,7000 --shape ar:4096,4096,8192 --shape ar:6000,2816,8192 --shape ar:8192,7168,4096 --shape ar:16384,3584,8192"
timeout 150 python3 -m fluxlite.profile --shape ar:2048,4096,4096 $AR --nproc 2 --impls sequential,decomposed,fused,torch_symm_mem,auto --rounds 7 --tune \
  --time-limit 135 --no-progress --out $R/ar 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar.log; echo "ar rc=$? at ${SECONDS}s"
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/bench_gpt_nosp.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt_nosp.log; echo "gpt rc=$? at ${SECONDS}s"; tail -7 $R/bench_gpt_nosp.log
