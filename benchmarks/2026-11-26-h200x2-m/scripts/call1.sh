#!/usr/bin/env bash
# auto at 16 old + 18 new shapes (head: latency timed after an untimed same call, auto's look-up memo);
# base (94eb65d) on the old 16; GPU tests of the kept code.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15
R=/tmp/res13a; rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
source benchmarks/2026-11-26-h200x2-m/scripts/auto_shapes.sh  # OLD, NEW; base: git archive 94eb65d fluxlite | tar -x -C .scratch/base13
prof() {  # dir out shapes
  (cd $1 && PYTHONPATH=$PWD timeout 180 python3 -m fluxlite.profile --tune $(for s in $3; do echo --shape $s; done) --nproc 2 \
    --impls sequential,decomposed,fused,auto --rounds 11 --time-limit 155 --no-progress --out $R/$2 2>&1 | grep -v '^W1' | grep -v measured > $R/$2.log)
  tail -1 $R/$2.log
}
export FLUXLITE_CACHE_DIR=$R/cache_head; prof $PWD auto_old_head "$OLD"
export FLUXLITE_CACHE_DIR=$R/cache_base; prof $PWD/.scratch/base13 auto_old_base "$OLD"
export FLUXLITE_CACHE_DIR=$R/cache_head; prof $PWD auto_new_head "$NEW"
