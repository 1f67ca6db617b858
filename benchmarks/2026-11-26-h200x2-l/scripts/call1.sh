#!/usr/bin/env bash
# RS traces (both ranks) base vs head; RS A/B profile alternated.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res12a; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
export PYTHONPATH=$PWD
for v in base head; do
  S=$PWD; [[ $v == base ]] && S=$PWD/.scratch/base
  mkdir -p $R/tr_$v
  SRC=$S CALLS=12 OUT=$R/tr_$v timeout 100 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-26-h200x2-j/scripts/trace_rs.py "8192,4096,8192 4096,14336,8192 8192,14336,8192" 2>&1 | grep -v '^W1' | tail -2
  for f in $R/tr_$v/*.json; do echo "== $v $(basename $f)"; python3 benchmarks/2026-11-26-h200x2-j/scripts/breakdown.py $f | tr '\n' ' '; echo; gzip $f; done | tee -a $R/breakdown.log
done
S="--shape rs:8192,4096,8192 --shape rs:4096,14336,8192 --shape rs:8192,7168,4096 --shape rs:4096,6144,12288 --shape rs:8192,14336,8192 --shape rs:4096,28672,8192"
for i in 1 2; do
  for v in base head; do
    P=$PWD; [[ $v == base ]] && P=$PWD/.scratch/base
    PYTHONPATH=$P timeout 80 python3 -m fluxlite.profile $S --nproc 2 --impls fused --rounds 4 --time-limit 65 --no-progress \
      --out $R/ab_${v}_$i 2>&1 | grep -v '^W1' | grep "RS " > $R/ab_${v}_$i.log
    awk -v v=$v '{print v, $0}' $R/ab_${v}_$i.log | cut -c1-150
  done
done
