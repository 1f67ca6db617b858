"""Print a kineto trace's GPU timeline (kernels, copies, memsets) from a start offset:
    python timeline.py trace_8192x4096x8192_r0.json.gz [start_us] [count]"""
import gzip, json, sys

path = sys.argv[1]
trace = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"
                 and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
t0 = events[0]["ts"]
start = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
count = int(sys.argv[3]) if len(sys.argv) > 3 else 60
for e in [e for e in events if e["ts"] - t0 >= start][:count]:
    print(f'{e["ts"] - t0:10.1f} {e["dur"]:8.1f} stream {e["args"].get("stream")} {e["cat"]:10s} {e["name"][:70]}')
