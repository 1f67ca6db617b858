import json, gzip, sys
path = sys.argv[1]
ev = json.load(gzip.open(path))["traceEvents"]
ks = sorted([e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("dur")], key=lambda e: e["ts"])
t0 = ks[0]["ts"]
# find step boundaries: print all events of the 2nd step: split by large gaps? just print all with dur > 20us
lo = float(sys.argv[2]) if len(sys.argv) > 2 else 0; hi = float(sys.argv[3]) if len(sys.argv) > 3 else 1e9
for e in ks:
    t = (e["ts"] - t0) / 1e3
    if lo <= t <= hi and e["dur"] > 15:
        print(f'{t:9.3f} {e["dur"]/1e3:7.3f} s{e.get("args",{}).get("stream")} {e["cat"][:6]} {e["name"][:80]}')
