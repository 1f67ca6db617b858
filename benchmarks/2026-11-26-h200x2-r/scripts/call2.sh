#!/usr/bin/env bash
# GEMM-RS matmul consumer: 1, 2 or 3 splits per chunk at the preset shapes over 1.03x the limit; GEMM-AR GPU tests.
R=/tmp/res18b; source .scratch/s18/common.sh
S="--shape rs:4096,14336,4096 --shape rs:8192,7168,4096 --shape rs:16384,3072,4096 --shape rs:16384,7168,4096 --shape rs:4096,14336,8192 --shape rs:4096,14784,8192 --shape rs:4096,18432,12288 --shape rs:4096,6144,12288 --shape rs:8192,6144,12288"
for run in 1 2; do for sp in 2 1 3; do
  SPLITS=$sp timeout 120 torchrun --standalone --nproc-per-node 2 .scratch/s18/splits_profile.py $S --impls fused --rounds 5 \
    --no-progress --out $R/s${sp}_$run 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/s${sp}_$run.log
  echo "splits $sp run $run at ${SECONDS}s"
done; done
python3 - <<'PY'
import json, glob, os
R = "/tmp/res18b"
rows = {}
for f in sorted(glob.glob(f"{R}/s*_*/profile.json")):
    tag = f.split("/")[-2]
    for r in json.load(open(f))["rows"]:
        rows.setdefault((r["op"], r["M"], r["K"], r["N"]), {})[tag] = r["vs_limit"].get("fused")
tags = sorted({t for v in rows.values() for t in v})
print("shape", *tags)
for k, v in rows.items():
    print(k, *[f"{v.get(t, float('nan')):.3f}" for t in tags])
PY
left=$((570 - SECONDS)); echo "gemm_ar tests with ${left}s"
timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_gemm_ar.py > $R/test_gpu_gemm_ar.log 2>&1; echo rc=$?; tail -8 $R/test_gpu_gemm_ar.log
