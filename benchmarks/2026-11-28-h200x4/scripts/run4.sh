R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
git apply benchmarks/2026-11-28-h200x4/scripts/rs_sum_splits.patch || exit 1  # FLUXLITE_RS_SUM / FLUXLITE_RS_SPLITS: the variants measured (not kept)
T="benchmarks/2026-11-28-h200x4/scripts/trace_op.py"; TR="timeout 100 torchrun --standalone --nproc-per-node"
SH4=8192x1024x8192,8192x2048x8192,8192x3072x8192,8192x4096x8192,8192x5120x8192,16384x2048x4096,4096x2048x8192
for tag in base sum base sum; do
  [[ $tag == sum ]] && export FLUXLITE_RS_SUM=1 || unset FLUXLITE_RS_SUM
  OP=gemm_rs SH=$SH4 TAG=$tag NOTRACE=1 $TR 4 $T 2>&1 | grep "W=4 gemm_rs" | tee -a $R/sweep4.log
done
echo "W4 at ${SECONDS}s"
export CUDA_VISIBLE_DEVICES=0,1
for tag in base sum; do
  [[ $tag == sum ]] && export FLUXLITE_RS_SUM=1 || unset FLUXLITE_RS_SUM
  OP=gemm_rs SH=8192x1024x8192,8192x2048x8192,8192x3072x8192,16384x2048x4096 TAG=$tag NOTRACE=1 $TR 2 $T 2>&1 | grep "W=2 gemm_rs" | tee -a $R/sweep2.log
done
echo "W2 at ${SECONDS}s"
