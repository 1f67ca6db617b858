#!/usr/bin/env bash
# The timed cuBLASLt choice: GPU tests; breakdown alternating with the heuristic's first; GEMM-RS presets and
# shapes off multiples of 128 against the limit.
R=/tmp/res23d; source .scratch/s23/common.sh
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
: > $R/gpu_tests.log
for f in tests/test_gpu_cublaslt.py tests/test_gpu_gemm_ar.py; do
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -4 | tee -a $R/gpu_tests.log
  echo "$f at ${SECONDS}s" | tee -a $R/gpu_tests.log
done
SH="rs:4096,14336,4096 rs:8192,7168,4096 rs:16384,3072,4096 rs:4096,14784,8192 rs:4096,6144,12288 rs:4096,24576,12288 rs:8192,18432,12288 rs:8192,6144,12288 rs:8192,11832,7184"
i=0
for v in "" untuned "" untuned; do
  i=$((i+1)); n=bo${i}_${v:-timed}
  VARIANT=$v timeout 75 torchrun --standalone --nproc-per-node 2 .scratch/s23/bo_variant.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res23d/bo*.json"))
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
U8="--shape rs:12288,7592,3264 --shape rs:8192,6424,13968 --shape rs:4096,14872,6376 --shape rs:8192,5080,9144 --shape rs:8192,5672,9376 --shape rs:8192,11928,7392 --shape rs:6144,11288,4128 --shape rs:10240,7280,13912 --shape rs:10240,4080,7016 --shape rs:8192,4968,7832 --shape rs:6144,4784,9160 --shape rs:6144,9136,10560 --shape rs:8192,11832,7184 --shape rs:10240,10736,4464"
left=$((560 - SECONDS))
timeout $left python3 -m fluxlite.profile $(cat .scratch/s23/preset_rs.txt) $U8 --nproc 2 --impls sequential,fused,torch_symm_mem --rounds 5 \
  --time-limit $((left - 15)) --no-progress --out $R/presets 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/presets.log; echo "presets rc=$? at ${SECONDS}s"
