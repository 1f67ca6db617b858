#!/usr/bin/env bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15 PYTHONPATH=$PWD
R=/tmp/res12d; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-l/scripts/diag_auto.py --tune --shape rs:1024,4096,8192 --shape ag:48,5120,13824 \
  --shape ag:5000,6144,6144 --impls sequential,decomposed,fused,auto --rounds 11 --no-progress --out $R/diag 2>&1 | grep -v "^W1\|Warn\|symm_mem" | tee $R/diag.log | grep "replay\|host_us\|RS \|AG "
