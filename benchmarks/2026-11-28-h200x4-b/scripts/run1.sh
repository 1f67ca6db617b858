R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi topo -m > $R/topo.txt 2>&1
N=$(nvidia-smi -L | wc -l); echo "gpus $N"
timeout 290 torchrun --standalone --nproc-per-node $N benchmarks/2026-11-28-h200x4-b/scripts/sweep.py 5 2>&1 | grep -v '^W1\|Warning\|warn\|enable_symm' > $R/sweep.log
echo "sweep rc=$? at ${SECONDS}s"; cat $R/sweep.log | tail -30
timeout $((520 - SECONDS)) python3 -m fluxlite.profile --shape ag:16,8192,2560 --shape ag:64,8192,2560 --shape ag:256,4096,4096 --shape ag:1000,3000,5000 --shape ag:520,5120,3456 \
  --shape rs:16,7168,8192 --shape rs:256,8192,8192 --shape rs:1000,3000,5000 --shape rs:2048,4096,4096 --shape rs:600,3584,6000 --shape rs:4096,3584,8192 \
  --nproc $N --impls fused,torch_symm_mem,auto --rounds 5 --time-limit $((500 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A13 'op, M x K' | head -14
