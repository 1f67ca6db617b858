#!/usr/bin/env bash
# Splits on the GEMM's row tiles (split_unit) against even cuts, alternating; GPU tests of the change.
R=/tmp/res25b; source .scratch/s25/common.sh
SH="rs:10240,4080,7016 rs:8192,4968,7832 rs:6144,4784,9160 rs:6144,9136,10560 rs:8192,11832,7184 rs:10240,10736,4464 rs:12288,5000,6000 rs:10240,7000,9000 rs:14336,6000,5000 rs:16384,3072,4096 rs:8192,7168,4096 rs:8192,6144,12288"
python3 .scratch/s25/units.py $SH 2>&1 | tee $R/units.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_cublaslt.py tests/test_gpu_gemm_ar.py -s 2>&1 | tail -5 | tee $R/tests1.txt
echo "tests1 at ${SECONDS}s"
i=0
for v in even unit even unit; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s25/bo_unit.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res25b/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
for mode in ("throughput", "latency"):
    print(f"fused/limit, splits/cublas ({mode})"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(14) for r in runs))
    for k in range(min(len(d["rows"]) for d in data.values())):
        cells = []
        for r in runs:
            x = data[r]["rows"][k]; t = {c: v[mode] for c, v in x["times_ms"].items()}
            row = f'{x["M"]}x{x["K"]}->{x["N"]}'
            cells.append(f'{t["fused"]/t["limit"]:.3f}/{t["splits"]/t["cublas"]:.3f}')
        print(row.ljust(22), " ".join(c.ljust(14) for c in cells))
print("rel_err fused (max over runs):", [max(data[r]["rows"][k]["rel_err"].get("fused", -1) for r in runs) for k in range(len(data[runs[0]]["rows"]))])
PY
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_fused.py -k "rs_matmul or gemm_rs" 2>&1 | tail -3 | tee $R/tests2.txt
