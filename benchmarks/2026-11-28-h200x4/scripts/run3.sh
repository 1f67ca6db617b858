R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
git apply benchmarks/2026-11-28-h200x4/scripts/rs_sum_splits.patch || exit 1  # FLUXLITE_RS_SUM / FLUXLITE_RS_SPLITS: the variants measured (not kept)
T="benchmarks/2026-11-28-h200x4/scripts/trace_op.py"
SH4=8192x2048x8192,8192x14336x8192,8192x7168x8192
TR="timeout 100 torchrun --standalone --nproc-per-node"
OP=gemm_rs SH=$SH4 TAG=base $TR 4 $T 2>&1 | grep -v '^W1' | tail -4
OP=gemm_rs SH=$SH4 TAG=sum FLUXLITE_RS_SUM=1 $TR 4 $T 2>&1 | grep -v '^W1' | tail -4
OP=gemm_rs SH=$SH4 TAG=s4 NOTRACE=1 FLUXLITE_RS_SPLITS=4 $TR 4 $T 2>&1 | grep -v '^W1' | tail -4
OP=gemm_rs SH=$SH4 TAG=sum_s4 NOTRACE=1 FLUXLITE_RS_SUM=1 FLUXLITE_RS_SPLITS=4 $TR 4 $T 2>&1 | grep -v '^W1' | tail -4
OP=gemm_ar SH=8192x7168x8192,8192x2048x8192 TAG=base NOTRACE=1 $TR 4 $T 2>&1 | grep -v '^W1' | tail -3
OP=gemm_ar SH=8192x7168x8192,8192x2048x8192 TAG=sum NOTRACE=1 FLUXLITE_RS_SUM=1 $TR 4 $T 2>&1 | grep -v '^W1' | tail -3
echo "W4 at ${SECONDS}s"
export CUDA_VISIBLE_DEVICES=0,1
for tag in base sum base sum; do
  [[ $tag == sum ]] && export FLUXLITE_RS_SUM=1 || unset FLUXLITE_RS_SUM
  OP=gemm_rs SH=8192x4096x8192,8192x28672x8192,8192x14336x8192 TAG=$tag NOTRACE=1 $TR 2 $T 2>&1 | grep -v '^W1' | tail -4
done
echo "W2 at ${SECONDS}s"
