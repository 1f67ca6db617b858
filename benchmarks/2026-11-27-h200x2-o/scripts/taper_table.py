"""Fused over the limit (throughput), fused ms (throughput), fused over sequential (latency) per shape
and split weights, from the taper_<i>_<weights>/profile.json files of a run folder.

    python3 taper_table.py benchmarks/2026-11-27-h200x2-o/run3
"""
import glob
import json
import os
import sys

table, tags = {}, []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "taper_*", "profile.json"))):
    tag = os.path.basename(os.path.dirname(path))
    tags.append(tag)
    for row in json.load(open(path))["rows"]:
        t = row["times_ms"]
        table.setdefault((row["M"], row["K"], row["N"]), {})[tag] = (
            t["fused"]["throughput"] / t["limit"]["throughput"], t["fused"]["throughput"],
            t["fused"]["latency"] / t["sequential"]["latency"])
print("| M x K -> N | " + " | ".join(tags) + " |")
print("| --- |" + " --- |" * len(tags))
for (M, K, N), cells in table.items():
    print(f"| {M}x{K}->{N} | " + " | ".join("%.3f / %.3f ms / %.3f" % cells[t] for t in tags) + " |")
