"""Print the kineto timelines of trace32.py: per file, the period per call (align kernel to align
kernel, both ranks) and rank 0's sixth call event by event (start, duration, end in us from its
alignment kernel; the stream; the kernel or copy).

    python3 summarize_trace32.py benchmarks/2026-11-27-h200x2-m/run3
"""
import glob
import gzip
import json
import os
import sys


def events(path):
    with gzip.open(path, "rt") as fh:
        trace = json.load(fh)
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
          and "sleep" not in e["name"]]
    return sorted(ev, key=lambda e: e["ts"])


for path in sorted(glob.glob(os.path.join(sys.argv[1], "tr_*.json.gz"))):
    ev = events(path)
    starts = [i for i, e in enumerate(ev) if "align" in e["name"]]
    period = (ev[starts[-1]]["ts"] - ev[starts[1]]["ts"]) / (len(starts) - 2)
    print(f"{os.path.basename(path)}: {len(starts)} calls, {period:.0f} us per call")
    if path.endswith(".0.json.gz"):
        t0 = ev[starts[5]]["ts"]
        for e in ev[starts[5]:starts[6]]:
            print(f'  {e["ts"] - t0:8.1f} +{e["dur"]:7.1f} end {e["ts"] - t0 + e["dur"]:8.1f}  stream {e["args"].get("stream")}  {e["name"][:60]}')
