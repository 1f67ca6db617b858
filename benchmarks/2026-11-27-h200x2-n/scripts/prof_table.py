"""The fused call over the limit and over sequential (throughput, latency) per shape and process, from
the profile.json files under a run folder (<prefix>_<i>_<tag>/, prefix ``prof`` unless given).

    python3 prof_table.py benchmarks/2026-11-27-h200x2-n/run1
    python3 prof_table.py benchmarks/2026-11-27-h200x2-o/run3 taper
"""
import glob
import json
import os
import sys

table, tags = {}, []
for path in sorted(glob.glob(os.path.join(sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "prof") + "_*", "profile.json"))):
    tag = os.path.basename(os.path.dirname(path))
    tags.append(tag)
    for row in json.load(open(path))["rows"]:
        t = row["times_ms"]
        table.setdefault((row["M"], row["K"], row["N"]), {})[tag] = (
            t["fused"]["throughput"] / t["limit"]["throughput"], t["fused"]["throughput"] / t["sequential"]["throughput"],
            t["fused"]["latency"] / t["sequential"]["latency"], t["fused"]["throughput"], t["fused"]["host"] * 1e3)
print("| M x K -> N | " + " | ".join(tags) + " |")
print("| --- |" + " --- |" * len(tags))
for (M, K, N), cells in table.items():
    print(f"| {M}x{K}->{N} | " + " | ".join("%.3f / %.3f / %.3f (%.3f ms, host %.0f us)" % cells[t] for t in tags) + " |")
