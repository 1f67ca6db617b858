#!/usr/bin/env bash
# A captured auto call on GPU (the new GPU test); auto against its candidates again at the shapes that missed 1.02x, 15 rounds.
R=/tmp/res18f; source .scratch/s18/common.sh
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_graphs.py -k "captured_auto" > $R/test_graphs_auto.log 2>&1; echo "test rc=$? at ${SECONDS}s"; tail -2 $R/test_graphs_auto.log
export FLUXLITE_CACHE_DIR=$R/cache
S="--shape rs:16,2048,2048 --shape rs:2,4096,4096 --shape ag:8,8192,3584 --shape rs:6,3072,5120 --shape rs:64,5120,5120 --shape rs:256,8192,8192 --shape rs:768,2560,6400 --shape ag:1024,7168,2304 --shape rs:1024,4096,8192 --shape ag:6000,5120,3456 --shape rs:8192,2304,6144"
timeout 170 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,decomposed,fused,auto --rounds 15 --tune \
  --time-limit 150 --no-progress --out $R/auto 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto.log; echo "auto rc=$? at ${SECONDS}s"
python3 - <<'PY'
import json
d = json.load(open("/tmp/res18f/auto/profile.json"))
for r in d["rows"]:
    t = r["times_ms"]; ab = r["auto_vs_best"]
    print(f'{r["op"][:6]:6} {r["M"]:6} {r["K"]:5} {r["N"]:5} tp {ab["throughput"]:.3f} lat {ab["latency"]:.3f} | tp seq {t["sequential"]["throughput"]*1e3:.1f} fus {t["fused"]["throughput"]*1e3:.1f} auto {t["auto"]["throughput"]*1e3:.1f} | lat seq {t["sequential"]["latency"]:.3f} fus {t["fused"]["latency"]:.3f} auto {t["auto"]["latency"]:.3f} | {r["auto"]["label"]} {r["auto"].get("modes")}')
PY
