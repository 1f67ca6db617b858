#!/usr/bin/env bash
# GEMM-AllReduce (its shots run the GEMM-RS consumer's GEMMs) at 13 shapes with auto; the GPTModel step
# without sequence parallelism.
R=/tmp/res24e; source .scratch/s24/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
AR="--shape ar:1,14336,8192 --shape ar:8,4096,8192 --shape ar:40,11008,4096 --shape ar:64,14336,8192 --shape ar:130,7000,5000 --shape ar:256,4096,8192 --shape ar:2048,8192,8192 --shape ar:3000,5000,7000 --shape ar:4096,4096,8192 --shape ar:6000,2816,8192 --shape ar:8192,7168,4096 --shape ar:16384,3584,8192"
timeout 160 python3 -m fluxlite.profile --shape ar:2048,4096,4096 $AR --nproc 2 --impls sequential,decomposed,fused,torch_symm_mem,auto --rounds 7 --tune \
  --time-limit 145 --no-progress --out $R/ar 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ar.log; echo "ar rc=$? at ${SECONDS}s"
timeout 110 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --out $R/bench_gpt_nosp.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_gpt_nosp.log; echo "gpt nosp rc=$? at ${SECONDS}s"; tail -8 $R/bench_gpt_nosp.log
