#!/usr/bin/env bash
# GPU tests of the tile rule; the rule against the heuristic's first (alternating); the GEMM-RS presets.
R=/tmp/res24a; source .scratch/s24/common.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version())" | tee -a $R/gpus.txt
git log --oneline -1 | tee -a $R/gpus.txt
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cublaslt.py tests/test_gpu_gemm_ar.py 2>&1 | tail -4 | tee $R/tests.log
echo "tests at ${SECONDS}s"
SH="rs:4096,14336,4096 rs:8192,7168,4096 rs:16384,3072,4096 rs:4096,14784,8192 rs:4096,6144,12288 rs:4096,24576,12288 rs:8192,18432,12288 rs:8192,6144,12288 rs:8192,11832,7184 rs:8192,14336,8192 rs:16384,4096,8192 rs:12288,7592,3264 rs:8192,6424,13968"
i=0
for v in rule first rule; do
  i=$((i+1)); n=bo${i}_$v
  VARIANT=$v timeout 90 torchrun --standalone --nproc-per-node 2 .scratch/s24/bo_variant.py --rounds 5 \
    --out $R/$n.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$n.log
  echo "$n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - <<'PY'
import json, glob
runs = sorted(glob.glob("/tmp/res24a/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
print("fused/limit (throughput), fused/sequential (latency)"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(14) for r in runs))
for k in range(min(len(d["rows"]) for d in data.values())):
    cells = []
    for r in runs:
        x = data[r]["rows"][k]; t = {c: v["throughput"] for c, v in x["times_ms"].items()}
        l = {c: v.get("latency") for c, v in x["times_ms"].items()}
        row = f'{x["M"]}x{x["K"]}->{x["N"]}'
        lat = f'{l["fused"]/l["sequential"]:.3f}' if l.get("fused") and l.get("sequential") else "-"
        cells.append(f'{t["fused"]/t["limit"]:.3f}/{lat}')
    print(row.ljust(22), " ".join(c.ljust(14) for c in cells))
PY
grep -h '^tiles' $R/bo1_rule.log | sort | uniq -c | head -30
timeout 250 python3 -m fluxlite.profile $(cat .scratch/s23/preset_rs.txt) --nproc 2 --impls fused,torch_symm_mem --rounds 5 \
  --time-limit 235 --no-progress --out $R/presets_rs 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/presets_rs.log; echo "presets rc=$? at ${SECONDS}s"
tail -3 $R/presets_rs.log | cut -c1-200
