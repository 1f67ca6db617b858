"""Tables of a run folder: the queued-call medians of qtime.log (tag, op, shape: every process's
median per call), then every profile.json under it (fused over the limit and over sequential in
throughput and latency, auto over the better of sequential and fused, host time per fused call).

    python3 scripts/tables.py run4
"""
import collections
import glob
import json
import os
import sys

folder = sys.argv[1]
log = os.path.join(folder, "qtime.log")
if os.path.exists(log):
    cells = collections.defaultdict(list)
    for line in open(log):
        words = line.split()
        if "x" in words[1]:  # run 2's lines name no op: GEMM-AllReduce
            words.insert(1, "ar")
        tag, op, shape, median = words[:4]
        cells[(op, shape)].append((tag, float(median)))
    for (op, shape), values in cells.items():
        by_tag = collections.defaultdict(list)
        for tag, v in values:
            by_tag[tag].append(v)
        print(f"{op} {shape:18s} " + "  ".join(f"{t} " + "/".join(f"{v:.0f}" for v in vs) for t, vs in by_tag.items()))
for path in sorted(glob.glob(os.path.join(folder, "*", "profile.json"))):
    print(os.path.basename(os.path.dirname(path)))
    for row in json.load(open(path))["rows"]:
        t = row["times_ms"]
        tp = {i: t[i]["throughput"] for i in t}
        lat = {i: t[i]["latency"] for i in t}
        line = (f"  {row['M']}x{row['K']}->{row['N']}: fused/limit {tp['fused'] / tp['limit']:.3f}, fused/sequential "
                f"{tp['fused'] / tp['sequential']:.3f} / {lat['fused'] / lat['sequential']:.3f}")
        if "auto" in t:
            line += (f", auto/best {tp['auto'] / min(tp['sequential'], tp['fused']):.3f} / "
                     f"{lat['auto'] / min(lat['sequential'], lat['fused']):.3f}")
        print(line + f", fused {tp['fused']:.3f} ms, host {t['fused']['host'] * 1e3:.0f} us")
