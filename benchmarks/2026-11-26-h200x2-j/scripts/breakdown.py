"""Per-call breakdown of the fused GEMM-RS calls in a trace_rs.py trace (the compute stream of rank 0):
the period from one call's alignment kernel to the next, split into GEMMs, copies of C, waits,
alignment, cuBLAS's memsets and idle time.    python breakdown.py trace.json.gz"""
import gzip, json, statistics, sys

path = sys.argv[1]
trace = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"
                 and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
aligns = [e for e in events if e["name"] == "align_kernel"]
compute = aligns[0]["args"]["stream"]
rows = []
for first, nxt in zip(aligns, aligns[1:]):
    inside = [e for e in events if first["ts"] <= e["ts"] < nxt["ts"] and e["args"].get("stream") == compute]
    part = {"gemm": 0.0, "copy of C": 0.0, "wait": 0.0, "align": 0.0, "memset": 0.0}
    for e in inside:
        name = e["name"]
        key = ("gemm" if name.startswith("nvjet") or "gemm" in name.lower() else "wait" if "wait" in name
               else "align" if name == "align_kernel" else "memset" if e["cat"] == "gpu_memset" else "copy of C")
        part[key] += e["dur"]
    period = nxt["ts"] - first["ts"]
    part["idle"] = period - sum(part.values())
    part["period"] = period
    rows.append(part)
for key in rows[0]:
    print(f"{key:10s} {statistics.median(r[key] for r in rows):8.1f} us")
