"""Per trace pair (tr_<tag>.{0,1}.json.gz, from trace_end.py): the period per call (alignment kernel to
alignment kernel) and the median and lowest duration of the gather's end kernels per call, both
ranks (the old code's two kernels, gather_push and gather_pull, summed per call).

    python3 end_times.py benchmarks/2026-11-27-h200x2-n/run2
"""
import glob
import gzip
import json
import os
import statistics
import sys

for path in sorted(glob.glob(os.path.join(sys.argv[1], "tr_*.0.json.gz"))):
    tag = os.path.basename(path)[3:-10]
    row = []
    for rank in (0, 1):
        with gzip.open(os.path.join(sys.argv[1], f"tr_{tag}.{rank}.json.gz"), "rt") as fh:
            events = json.load(fh)["traceEvents"]
        ev = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")),
                    key=lambda e: e["ts"])
        starts = [e["ts"] for e in ev if "align" in e["name"]]
        period = (starts[-1] - starts[1]) / (len(starts) - 2)
        ends = []  # per call: the end kernels' summed duration
        for lo, hi in zip(starts, starts[1:] + [float("inf")]):
            ends.append(sum(e["dur"] for e in ev if "gather" in e["name"] and lo <= e["ts"] < hi))
        row.append(f"period {period:.1f} us, end median {statistics.median(ends):.1f} min {min(ends):.1f}")
    print(f"{tag}: rank 0 {row[0]}; rank 1 {row[1]}")
