import gzip, json, sys
p = sys.argv[1]
ev = json.load(gzip.open(p))["traceEvents"]
ks = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
ks.sort(key=lambda e: e["ts"])
# the fused calls: after the second sleep
sleeps = [e for e in ks if "sleep" in e["name"].lower() or "spin" in e["name"].lower()]
t0 = sleeps[-1]["ts"] + sleeps[-1]["dur"]
calls = [e for e in ks if e["ts"] >= t0]
aligns = [e for e in calls if "align" in e["name"]]
# the 6th call's window
i = int(sys.argv[2]) if len(sys.argv) > 2 else 5
start, end = aligns[i]["ts"], aligns[i + 1]["ts"]
print("call period", end - start, "us; mean period", (aligns[-1]["ts"] - aligns[1]["ts"]) / (len(aligns) - 2))
for e in calls:
    if start <= e["ts"] < end:
        print(f'{e["ts"]-start:8.1f} {e["dur"]:7.1f} s{e.get("args",{}).get("stream")} {e["cat"][:6]} {e["name"][:70]} {e.get("args",{}).get("bytes","")}')
