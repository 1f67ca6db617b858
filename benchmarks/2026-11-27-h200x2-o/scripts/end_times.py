"""Per call of the traces in a run folder (tr_<tag>_<M>x<K>x<N>.<rank>.json.gz, ten queued fused
gemm_ar calls): the gap from the last GEMM's end to the end kernel's start, the end kernel's time,
the call from its alignment kernel to the end kernel's end, and the period between alignment
kernels; medians, rank 0 | rank 1.

    python3 end_times.py benchmarks/2026-11-27-h200x2-o/run2 [old,new]
"""
import glob
import gzip
import json
import os
import statistics as st
import sys

folder = sys.argv[1]
tags = sys.argv[2].split(",") if len(sys.argv) > 2 else ["old", "new"]
shapes = sorted({os.path.basename(p).split("_")[-1].rsplit(".", 3)[0] for p in glob.glob(folder + "/tr_*.json.gz")})
for shape in shapes:
    for tag in tags:
        cells = []
        for rank in (0, 1):
            trace = json.load(gzip.open(f"{folder}/tr_{tag}_{shape}.{rank}.json.gz"))
            events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")),
                            key=lambda e: e["ts"])
            gaps, ends, calls, periods, last_gemm, align = [], [], [], [], None, None
            for e in events:
                if e["name"].startswith("align"):
                    if align is not None:
                        periods.append(e["ts"] - align)
                    align = e["ts"]
                elif e["name"].startswith("nvjet"):
                    last_gemm = e["ts"] + e["dur"]
                elif e["name"].startswith("gather_end") and last_gemm is not None:
                    gaps.append(e["ts"] - last_gemm)
                    ends.append(e["dur"])
                    calls.append(e["ts"] + e["dur"] - align)
            cells.append("gap %5.1f end %5.1f call %6.1f period %6.1f us" % tuple(map(st.median, (gaps, ends, calls, periods))))
        print(f"{shape:16s} {tag:9s} " + " | ".join(cells))
