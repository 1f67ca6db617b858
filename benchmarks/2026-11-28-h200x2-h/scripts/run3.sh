R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The decode forward (sequence-parallel rows) on this code; the profiler at small AG-GEMM calls with the limit and
# torch's fused op; one call's device timeline.
timeout 230 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --prefill 2048 --decode 1,8,64,256 \
  --decode-layout sp --out $R/inf_sp.json > $R/inf_sp.log 2>&1; echo "inference rc=$? at ${SECONDS}s"
grep -iv "warn\|^W1\|symm_mem.enable" $R/inf_sp.log | tail -24
S="--shape ag:8,8192,5120 --shape ag:8,8192,28672 --shape ag:64,8192,28672 --shape ag:256,8192,28672 --shape ag:40,5120,13824 --shape ag:6,4096,6144 --shape ag:18,3584,9472"
FLUXLITE_CACHE_DIR=$R/cache timeout $((470 - SECONDS)) python3 -m fluxlite.profile $S --nproc 2 --impls decomposed,fused,auto,torch_symm_mem \
  --rounds 5 --time-limit $((450 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1; echo "profile rc=$? at ${SECONDS}s"
grep -iv "warn\|^W1\|symm_mem.enable" $R/prof.log | tail -40
timeout $((580 - SECONDS)) torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ag:8,8192,28672 ag:8,8192,5120 --out $R/trace > $R/trace.log 2>&1
grep -v "^W1\|Warning\|warn\|symm_mem.enable" $R/trace.log | grep -A4 "rank 0"
echo "done at ${SECONDS}s"
