"""Per-call breakdown of the fused AG-GEMM calls in a trace_ag.py trace (rank 0): the period from one
call's alignment kernel to the next, split into the consumer's GEMMs, its split waits, the alignment
kernel, cuBLAS's memsets and the rest (idle on the consumer's path); the copy engine's time beside it.
The first 8 calls are the matmul consumer's, the next 8 the Triton kernel's.
    python breakdown_ag.py trace.json.gz"""
import gzip, json, statistics, sys

path = sys.argv[1]
trace = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"
                 and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
aligns = [e for e in events if e["name"] == "align_kernel"]
cublas = [e["dur"] for e in events if e["ts"] < aligns[0]["ts"] and e["name"].startswith("nvjet")]
print(f"cuBLAS alone: {statistics.median(cublas):.1f} us per GEMM")
for label, calls in (("matmul consumer", aligns[:9]), ("Triton kernel", aligns[8:])):
    rows = []
    for first, nxt in zip(calls, calls[1:]):
        part = dict.fromkeys(("gemm", "split wait", "align", "memset", "copy engine"), 0.0)
        for e in events:
            if not first["ts"] <= e["ts"] < nxt["ts"]:
                continue
            name = e["name"]
            key = ("align" if name == "align_kernel" else "split wait" if "wait" in name
                   else "memset" if e["cat"] == "gpu_memset" else "copy engine" if e["cat"] == "gpu_memcpy" else "gemm")
            part[key] += e["dur"]
        part["period"] = nxt["ts"] - first["ts"]
        part["rest"] = part["period"] - sum(v for k, v in part.items() if k not in ("period", "copy engine"))
        rows.append(part)
    print(label + ": " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.1f}" for k in rows[0]) + " (us per call)")
