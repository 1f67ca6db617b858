R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
for g in --graph ""; do
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes ag:8192,8192,7168 rs:8192,7168,8192 ag:4096,8192,2560 $g --out $R/trace > $R/trace$g.log 2>&1; echo "trace $g rc=$? at ${SECONDS}s"; grep -v "^W1\|arn\|symm_mem.enable" $R/trace$g.log | tail -70
done
