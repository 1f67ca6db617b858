#!/usr/bin/env bash
# Every preset shape (four models, 4096/8192/16384 tokens): fused against the limit, sequential and
# torch's fused ops; then replays against eager calls.
R=/tmp/res22c; source .scratch/s22/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
timeout 440 python3 -m fluxlite.profile $(cat .scratch/s22/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 420 --no-progress --out $R/presets 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/presets.log; echo "presets rc=$? at ${SECONDS}s"
tail -3 $R/presets.log | cut -c1-200
timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 5 --out $R/bench_graphs.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_graphs.log; echo "graphs rc=$? at ${SECONDS}s"; tail -9 $R/bench_graphs.log
