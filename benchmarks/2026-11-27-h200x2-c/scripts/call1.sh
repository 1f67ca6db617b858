#!/usr/bin/env bash
# Current code at shapes in no earlier list: unaligned N and K over 0.5 ms (fused against the limit,
# sequential and torch's fused ops), and auto against its candidates from 2 to 16384 rows.
R=/tmp/res22a; source .scratch/s22/common.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version())" | tee -a $R/gpus.txt
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 & 
U="--shape ag:2048,12306,7520 --shape rs:5000,12373,12933 --shape ag:16384,7169,6828 --shape rs:16384,3620,8668 --shape ag:3072,9307,11530 --shape rs:2048,14594,10245 --shape ag:4096,3368,14167 --shape rs:4096,14467,8914 --shape ag:5000,13687,5627 --shape rs:6144,5749,7096 --shape ag:6144,7267,14094 --shape rs:4096,14879,9642"
timeout 270 python3 -m fluxlite.profile --shape ag:4096,8192,4096 $U --nproc 2 --impls sequential,fused,torch_symm_mem --rounds 5 \
  --time-limit 250 --no-progress --out $R/unaligned 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/unaligned.log; echo "unaligned rc=$? at ${SECONDS}s"
tail -20 $R/unaligned.log
export FLUXLITE_CACHE_DIR=$R/cache
S="--shape ag:2,5120,5504 --shape rs:6,3072,3584 --shape ag:24,6144,1024 --shape rs:78,5120,2048 --shape ag:200,3072,6400 --shape rs:640,8192,5504 --shape ag:1500,2048,4096 --shape rs:2600,6144,1024 --shape ag:5120,7168,3000 --shape rs:9000,6144,8192 --shape ag:13000,2048,1024 --shape rs:16384,4544,2048"
timeout 230 python3 -m fluxlite.profile --shape rs:2048,4096,4096 $S --nproc 2 --impls sequential,decomposed,fused,auto --rounds 9 --tune \
  --time-limit 210 --no-progress --out $R/auto 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto.log; echo "auto rc=$? at ${SECONDS}s"
python3 - <<'PY'
import json
d = json.load(open("/tmp/res22a/auto/profile.json"))
for r in d["rows"]:
    ab = r.get("auto_vs_best") or {}; bb = r.get("auto_vs_best_bounds") or {}
    f = lambda m: f'{ab.get(m, float("nan")):.3f} [{",".join(f"{x:.3f}" for x in bb.get(m) or [])}]'
    print(f'{r["op"][:6]:6} {r["M"]:6} {r["K"]:5} {r["N"]:5} tp {f("throughput")} lat {f("latency")} | {r["auto"]["label"]}')
PY
