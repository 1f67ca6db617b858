#!/usr/bin/env bash
# The heuristic's second cuBLASLt candidate against its first in the matmul consumer, alternating.
R=/tmp/res23e; source .scratch/s23/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
SH="rs:4096,14336,4096 rs:8192,7168,4096 rs:16384,3072,4096 rs:4096,14784,8192 rs:4096,6144,12288 rs:4096,24576,12288 rs:8192,18432,12288 rs:8192,6144,12288 rs:8192,11832,7184 rs:8192,14336,8192 rs:16384,4096,8192 rs:12288,7592,3264 rs:8192,6424,13968"
i=0
for v in second first second first; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 85 torchrun --standalone --nproc-per-node 2 .scratch/s23/bo_variant.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res23e/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
print("fused/limit, splits/cublas, splits+copy/cublas"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(20) for r in runs))
for k in range(min(len(d["rows"]) for d in data.values())):
    cells = []
    for r in runs:
        x = data[r]["rows"][k]; t = {c: v["throughput"] for c, v in x["times_ms"].items()}
        row = f'{x["M"]}x{x["K"]}->{x["N"]}'
        cells.append(f'{t["fused"]/t["limit"]:.3f}/{t["splits"]/t["cublas"]:.3f}/{t["splits+copy"]/t["cublas"]:.3f}')
    print(row.ljust(22), " ".join(c.ljust(20) for c in cells))
PY
grep -h '^algos' $R/bo2_first.log | sort -u | head -30
