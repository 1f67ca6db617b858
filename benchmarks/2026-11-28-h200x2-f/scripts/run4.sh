R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
S="--shape ag:504,3742,2991 --shape rs:106,2735,8562 --shape ar:13268,5872,3282 --shape ag:10078,3232,1051 --shape rs:2372,6776,4607 --shape ar:1621,5858,2933 --shape ag:1622,4412,2202 --shape rs:4626,7784,7715 --shape ar:286,4441,4021 --shape ag:1152,5882,6355 --shape rs:18,3541,5457 --shape ar:10847,6195,4686"
FLUXLITE_CACHE_DIR=$R/cache timeout 420 python3 -m fluxlite.profile $S --nproc 2 --impls decomposed,fused,auto,torch_symm_mem --rounds 5 --time-limit 400 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A14 'op, M x K' | head -14
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/cache/dispatch.json"))
for k, e in d.get("entries", d).items():
    if isinstance(e, dict) and "rounds" in e:
        print(k.split(" ")[:4], e["rounds"], e["impl"], {m: v["impl"] for m, v in e.get("modes", {}).items()})
PY
