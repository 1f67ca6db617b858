#!/usr/bin/env bash
# GEMM-RS long-K shapes: addfb01 (/tmp/base) against the working tree, alternated.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
S="--shape rs:8192,14336,8192 --shape rs:4096,28672,8192 --shape rs:8192,14784,8192 --shape rs:16384,29568,8192 --shape rs:4096,24576,12288 --shape rs:8192,4096,8192"
for i in 1 2; do
  for v in base head; do
    P=$PWD; [[ $v == base ]] && P=/tmp/base
    PYTHONPATH=$P timeout 70 python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 4 --time-limit 55 --no-progress \
      --out $R/${v}_$i 2>&1 | grep -v '^W1' | grep "RS " | tee $R/${v}_$i.log | awk -v v=$v '{print v, $0}'
  done
done
