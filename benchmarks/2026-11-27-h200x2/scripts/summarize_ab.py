"""Print fused / sequential (throughput, latency) and fused / limit for every profile.json under a
results folder, oldest run first: ``python3 summarize_ab.py /tmp/res20a``."""
import glob
import json
import os
import sys

for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "profile.json")), key=os.path.getmtime):
    d = json.load(open(f))
    print(f.split("/")[-2])
    for r in d["rows"]:
        t = r["times_ms"]
        print(f'  {r["op"][:7]:7} {r["M"]:6} {r["K"]:5} {r["N"]:5} seq {t["sequential"]["throughput"]:.3f} '
              f'fused {t["fused"]["throughput"]:.3f} f/s tp {t["fused"]["throughput"] / t["sequential"]["throughput"]:.3f} '
              f'lat {t["fused"]["latency"] / t["sequential"]["latency"]:.3f} f/limit {r["vs_limit"]["fused"]:.3f}')
