# The prologue every device call of this folder sources (from the repository root), with R set to its
# results folder: no NVLink multicast, fluxlite's bounded waits at 15 s, the results packed into $OUT on
# exit. prof OUT "SHAPES" [SECONDS]: auto against sequential, decomposed and fused at the shapes, --tune,
# 11 rounds, bounded by SECONDS (default 180).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 FLUXLITE_TIMEOUT_S=15 PYTHONPATH=$PWD
HERE=benchmarks/2026-11-26-h200x2-m/scripts
rm -rf $R; mkdir -p $R; trap 'tar czf $OUT/res.tgz -C $R .' EXIT
nvidia-smi -L | head -2 | tee $R/gpus.txt
prof() {
  local limit=${3:-180}
  FLUXLITE_CACHE_DIR=$R/cache timeout $limit python3 -m fluxlite.profile --tune $(for s in $2; do echo --shape $s; done) \
    --nproc 2 --impls sequential,decomposed,fused,auto --rounds 11 --time-limit $((limit - 25)) --no-progress --out $R/$1 2>&1 \
    | grep -v '^W1' | grep -v measured > $R/$1.log
  tail -1 $R/$1.log
}
