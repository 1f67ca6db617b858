"""Tables of this folder from its JSON files: `auto` against the best of fused, decomposed and sequential
(act30.py, runs 3 and 5-7), old against new where both ran, and each dispatch record's choices.
Run from the folder: python3 scripts/summarize.py"""
import json, statistics as st
from pathlib import Path

NAMES = ("fused", "decomposed", "sequential")


def ratios(rows):
    out = []
    for r in rows:
        bt, bl = (min(r[f"{x}_{m}"] for x in NAMES) for m in ("tp", "lat"))
        out.append((r, r["auto_tp"] / bt, r["auto_lat"] / bl))
    return out


def table(title, files):
    print(f"\n### {title}\n")
    sides = {side: [x for f in fs for x in ratios(json.load(open(f)))] for side, fs in files.items()}
    print("| case | " + " | ".join(f"{s}: auto/best tp, lat" for s in sides) + " | fused/seq tp, lat (last) |")
    print("| --- |" + " --- |" * (len(sides) + 1))
    base = list(sides.values())[-1]
    for i, (r, _, _) in enumerate(base):
        cells = [f"{sides[s][i][1]:.3f}, {sides[s][i][2]:.3f}" for s in sides]
        f = (r["fused_tp"] / r["sequential_tp"], r["fused_lat"] / r["sequential_lat"])
        print(f"| {r['M']}x{r['K']}->{r['n']} {r['act']} | " + " | ".join(cells) + f" | {f[0]:.3f}, {f[1]:.3f} |")
    for s, v in sides.items():
        tp, lat = [x[1] for x in v], [x[2] for x in v]
        print(f"\n{s}: {len(v)} cases; within 1.02: throughput {sum(x <= 1.02 for x in tp)}, latency "
              f"{sum(x <= 1.02 for x in lat)}; geometric mean {st.geometric_mean(tp):.3f} / {st.geometric_mean(lat):.3f}; "
              f"max {max(tp):.3f} / {max(lat):.3f}")


def choices(path):
    print(f"\n### dispatch records: {path}\n")
    for k, e in sorted(json.load(open(path))["entries"].items()):
        lab = lambda v: v["impl"] + ("" if not v.get("config") else "[s%(num_stages)d g%(group_m)d]" % v["config"])
        print(f"- {k.split(' bfloat16')[0]}: both {lab(e)}, throughput {lab(e['modes']['throughput'])}, "
              f"latency {lab(e['modes']['latency'])}, {e['rounds']} rounds")


table("run 3: HEAD (both on device throughput), GELU and SwiGLU", {"HEAD": ["run3/act30.json"]})
table("run 5: eager reading derived (max of device time and issue time)", {"derived": ["run5/act30.json"]})
table("run 6: old (HEAD) against new (eager batch), one machine", {"old": ["run6/act30_old.json"], "new": ["run6/act30_new.json"]})
table("run 7: old against new, decode sizes and four more shapes", {"old": ["run7/dec_old.json", "run7/rand_old.json"],
                                                                       "new": ["run7/dec_new.json", "run7/rand_new.json"]})
for p in ("run1/cache_act/dispatch.json", "run6/cache_new/dispatch.json", "run7/cache_new/dispatch.json"):
    choices(p)
