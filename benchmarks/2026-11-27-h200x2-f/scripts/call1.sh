#!/usr/bin/env bash
# GEMM-RS matmul consumer: split boundaries on multiples of 768 rows (split_align.py) against the
# committed halves, alternating, at the off-128 shapes and presets near 1.03x.
R=/tmp/res25a; source .scratch/s25/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
SH="rs:10240,4080,7016 rs:8192,4968,7832 rs:6144,4784,9160 rs:6144,9136,10560 rs:8192,11832,7184 rs:10240,10736,4464 rs:16384,3072,4096 rs:8192,7168,4096 rs:4096,6144,12288 rs:8192,6144,12288"
i=0
for v in base align base align; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s25/bo_variant.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res25a/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
print("fused/limit, splits/cublas (throughput)"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(14) for r in runs))
for k in range(min(len(d["rows"]) for d in data.values())):
    cells = []
    for r in runs:
        x = data[r]["rows"][k]; t = {c: v["throughput"] for c, v in x["times_ms"].items()}
        row = f'{x["M"]}x{x["K"]}->{x["N"]}'
        cells.append(f'{t["fused"]/t["limit"]:.3f}/{t["splits"]/t["cublas"]:.3f}')
    print(row.ljust(22), " ".join(c.ljust(14) for c in cells))
PY
