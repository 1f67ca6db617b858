#!/usr/bin/env bash
# A repeated auto call keyed by the dispatch stamp: host time against the forced call (cProfile diff), auto vs its
# candidates at 36 shapes of 2-16384 rows (the profiler's rounds), and a noise control (the forced call twice).
R=/tmp/res18e; source .scratch/s18/common.sh
for s in ag:8,8192,3584 rs:1024,4096,8192; do
  BACKEND=nccl IMPL=fused timeout 100 torchrun --standalone --nproc-per-node 2 .scratch/s18/prof_diff.py $s 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/prof_${s//[:,]/_}.log
  grep "host us" $R/prof_${s//[:,]/_}.log
done
export FLUXLITE_CACHE_DIR=$R/cache
S1="--shape rs:2,4096,4096 --shape ag:8,8192,3584 --shape rs:64,5120,5120 --shape ag:200,4096,6144 --shape rs:256,8192,8192 --shape ag:256,4096,4096 --shape rs:512,4096,4096 --shape ag:640,6656,4608 --shape rs:1024,4096,8192 --shape ag:1536,8192,2816 --shape rs:2048,3584,4096 --shape ag:3000,4096,7168 --shape rs:4096,7168,5120 --shape ag:6000,5120,3456 --shape rs:8192,2304,6144 --shape ag:12288,4096,4096 --shape rs:16384,1792,4096 --shape ag:16384,8192,1024"
S2="--shape rs:6,3072,5120 --shape ag:16,5120,7168 --shape rs:96,8192,2752 --shape ag:128,3584,9472 --shape rs:384,6144,3328 --shape ag:448,4096,11008 --shape rs:768,2560,6400 --shape ag:1024,7168,2304 --shape rs:1280,5120,5120 --shape ag:2560,3072,5504 --shape rs:3584,4096,3584 --shape ag:5120,6144,2048 --shape rs:6144,3200,8192 --shape ag:7168,2048,6912 --shape rs:10240,4096,2560 --shape ag:14336,3584,3072 --shape rs:16384,5504,4096 --shape ag:16384,1536,8192"
for run in s1:S1 s2:S2; do
  n=${run%%:*}; v=${run##*:}
  timeout 150 python3 -m fluxlite.profile ${!v} --nproc 2 --impls sequential,decomposed,fused,auto --rounds 7 --tune \
    --time-limit 130 --no-progress --out $R/auto_$n 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_$n.log; echo "auto_$n rc=$? at ${SECONDS}s"
done
timeout 120 torchrun --standalone --nproc-per-node 2 .scratch/s18/auto_gap.py ag:8,8192,3584 rs:64,5120,5120 ag:640,6656,4608 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_gap.log; echo "auto_gap rc=$? at ${SECONDS}s"
grep "==\|L:\|TL:\|host per" $R/auto_gap.log
python3 - <<'PY'
import json
for n in ("s1", "s2"):
    try:
        d = json.load(open(f"/tmp/res18e/auto_{n}/profile.json"))
    except Exception as e:
        print(n, e); continue
    for r in d["rows"]:
        t = r["times_ms"]; ab = r["auto_vs_best"]
        print(f'{r["op"][:6]:6} {r["M"]:6} {r["K"]:5} {r["N"]:5} tp {ab["throughput"]:.3f} lat {ab["latency"]:.3f} | lat seq {t["sequential"]["latency"]:.3f} fus {t["fused"]["latency"]:.3f} auto {t["auto"]["latency"]:.3f} | host seq {t["sequential"]["host"]*1e3:.0f} fus {t["fused"]["host"]*1e3:.0f} auto {t["auto"]["host"]*1e3:.0f} | {r["auto"]["label"]} {({m: c for m, c in r["auto"].get("modes", {}).items()})}')
PY
