R=/tmp/r10; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
export FLUXLITE_CACHE_DIR=$R/cache
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/bench_inference.py --layers 2 --prefill 512 --decode 8,64 --decode-layout sp --out $R/inf_sp.json > $R/inf_sp.log 2>&1; echo "inference rc=$? at ${SECONDS}s"; grep -iv "warn\|^W1" $R/inf_sp.log | grep "auto\|sequential \|fused " | tail -8
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/cache/dispatch.json"))
for k, e in d.get("entries", d).items():
    if isinstance(e, dict) and "rounds" in e and "M=" in k:
        vb = e.get("vs_baseline", {})
        print(k.split(" ")[:4], "rounds", e["rounds"], "both", e["impl"], {m: v["impl"] for m, v in e.get("modes", {}).items()},
              {lab: {m: [round(x, 3) for x in b] for m, b in by.items() if m != "host"} for lab, by in vb.items() if lab != "sequential"})
PY
