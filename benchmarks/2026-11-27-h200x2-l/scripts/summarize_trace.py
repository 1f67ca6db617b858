"""Per-call figures of run 3's timelines (trace31.json.<rank>): span of the 20 calls per call, the
alignment kernel's median and max duration, GEMM kernel time per call, copies per call.
    python3 scripts/summarize_trace.py run3"""
import json
import statistics
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "run3"
for rank in (0, 1):
    print("rank", rank)
    for key, runs in json.load(open(f"{folder}/trace31.json.{rank}")).items():
        for events in runs:
            ev = [e for e in events if "spin" not in e[0] and "sleep" not in e[0]]
            t0, t1 = min(e[1] for e in ev), max(e[1] + e[2] for e in ev)
            align = [e[2] for e in ev if e[0].startswith("align")]
            gemm = [e[2] for e in ev if not e[0].startswith(("align", "split_wait")) and "emcpy" not in e[0]]
            copies = [e[2] for e in ev if "emcpy" in e[0]]
            print(f"  {key:32s} span/call {(t1 - t0) / 20:7.1f} us  align med {statistics.median(align):5.1f} "
                  f"max {max(align):6.1f}  GEMM/call {sum(gemm) / 20:7.1f}  copies/call {len(copies) / 20:.0f}")
