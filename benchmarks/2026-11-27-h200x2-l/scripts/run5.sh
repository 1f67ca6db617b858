R=/tmp/r5; source benchmarks/2026-11-27-h200x2-h/scripts/common.sh
run() { timeout 150 torchrun --standalone --nproc-per-node 2 "$@" 2>&1 | grep -v 'Warning\|warn' ; }
run benchmarks/2026-11-27-h200x2-l/scripts/nocomm_gpt.py --no-sequence-parallel --modes megatron --out $R/nocomm1.json | tee $R/nocomm1.log
run scripts/bench_gpt.py --no-sequence-parallel --out $R/nosp.json | tee $R/nosp.log
run benchmarks/2026-11-27-h200x2-l/scripts/nocomm_gpt.py --no-sequence-parallel --modes megatron --out $R/nocomm2.json | tee $R/nocomm2.log
