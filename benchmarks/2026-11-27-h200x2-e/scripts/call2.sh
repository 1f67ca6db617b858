#!/usr/bin/env bash
# Shapes with N and K off multiples of 128 (and AG presets near 1.03): the committed code against
# AG-GEMM's matmul consumer with the 128x256 tile rule too, alternating.
R=/tmp/res24b; source .scratch/s24/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
SH="ag:16384,5640,6112 rs:10240,4080,7016 ag:16384,6984,8608 rs:8192,4968,7832 ag:6000,3376,13432 rs:6144,4784,9160 ag:6144,7696,7064 rs:6144,9136,10560 ag:6144,10184,10200 rs:8192,11832,7184 ag:6000,6560,13928 rs:10240,10736,4464 ag:4096,8192,14784 ag:4096,8192,14336 ag:8192,8192,5120"
i=0
for v in rule ag256 rule ag256; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 130 torchrun --standalone --nproc-per-node 2 .scratch/s24/bo_variant.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res24b/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
print("fused/limit (throughput), fused/sequential (latency), fused/torch (thr)"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(20) for r in runs))
for k in range(min(len(d["rows"]) for d in data.values())):
    cells = []
    for r in runs:
        x = data[r]["rows"][k]; t = {c: v["throughput"] for c, v in x["times_ms"].items()}
        l = {c: v.get("latency") for c, v in x["times_ms"].items()}
        row = f'{x["op"][:2]}{x["M"]}x{x["K"]}->{x["N"]}'
        lat = f'{l["fused"]/l["sequential"]:.3f}' if l.get("fused") and l.get("sequential") else "-"
        tor = f'{t["fused"]/t["torch"]:.3f}' if t.get("torch") else "-"
        cells.append(f'{t["fused"]/t["limit"]:.3f}/{lat}/{tor}')
    print(row.ljust(22), " ".join(c.ljust(20) for c in cells))
PY
for f in $R/bo1_rule.log $R/bo2_ag256.log; do echo $f; grep -h '^tiles' $f | sort | uniq -c | head -30; done
