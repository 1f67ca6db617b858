#!/usr/bin/env bash
# Every preset shape (four models, 4096/8192/16384 tokens, AG and GEMM-RS): fused against the limit,
# sequential and torch's fused ops, on the code as it stands.
R=/tmp/res25f; source .scratch/s25/common.sh
timeout 300 python3 -m fluxlite.profile $(cat .scratch/s25/preset_shapes.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 280 --no-progress --out $R/presets 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/presets.log; echo "presets rc=$? at ${SECONDS}s"
python3 benchmarks/2026-11-27-h200x2-c/scripts/summarize_presets.py $R/presets/profile.json | tee $R/summary.txt
