#!/usr/bin/env bash
# auto's preference order: the decoder stack's prefill with the previous code (decomposed before fused) and this
# code (decomposed last), alternating; each run's dispatch cache kept (its records hold every candidate's ratios).
R=/tmp/res19e; source .scratch/s19/common.sh
for run in old1 new1 old2 new2; do
  src=scripts; [[ $run == old* ]] && src=.scratch/s19/old/scripts  # each script puts its own tree first on the path
  FLUXLITE_CACHE_DIR=$R/cache_$run timeout 150 torchrun --standalone --nproc-per-node 2 $src/bench_inference.py \
    --layers 2 --prefill 2048,8192 --decode 256 --impls sequential,fused,auto --out $R/inf_$run.json 2>&1 \
    | grep -v '^W1\|Warning\|enable_symm' > $R/inf_$run.log; echo "$run rc=$? at ${SECONDS}s"; grep "^prefill\|^decode" $R/inf_$run.log
done
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/res19e/cache_*/*.json")):
    d = json.load(open(f))
    ents = d.get("entries", d)
    for k, e in ents.items():
        if not isinstance(e, dict) or "record" not in e and "vs_baseline" not in e: continue
        rec = e.get("record", e)
        vb = rec.get("vs_baseline", {})
        if "decomposed" in vb:
            print(f.split("/")[-2], k[:90], e.get("modes") or e.get("impl"),
                  {lab: [round(x, 3) for x in v["throughput"]] for lab, v in vb.items() if lab != "sequential"})
PY
