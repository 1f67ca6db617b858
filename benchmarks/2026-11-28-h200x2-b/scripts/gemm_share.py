"""Per trace (tr_<tag>_<shape>.<rank>.json.gz): the reference GEMM (median kernel time of 10 queued
torch.matmul), and per fused call (from one align kernel to the next): the period, the sum of its
GEMM kernels' times, the time from its first GEMM's start to its last GEMM's end, and the tail from
the last GEMM's end to the end kernel's end. Medians in us."""
import glob, gzip, json, os, statistics as st, sys
folder = sys.argv[1]
for path in sorted(glob.glob(folder + "/tr_*.json.gz")):
    ev = sorted((e for e in json.load(gzip.open(path))["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")), key=lambda e: e["ts"])
    sleeps = [i for i, e in enumerate(ev) if "spin_kernel" in e["name"]]
    ref = [e["dur"] for e in ev[sleeps[0] + 1:sleeps[1]] if e.get("cat") == "kernel"]
    calls, cur = [], None
    for e in ev[sleeps[1] + 1:]:
        if e["name"].startswith("align"):
            cur = []; calls.append(cur)
        if cur is not None:
            cur.append(e)
    rows = []
    for i, c in enumerate(calls[:-1]):
        gem = [e for e in c if e.get("cat") == "kernel" and not e["name"].startswith(("align", "gather_end", "split_wait"))]
        end = [e for e in c if "gather_end" in e["name"]]
        period = calls[i + 1][0]["ts"] - c[0]["ts"]
        span = gem[-1]["ts"] + gem[-1]["dur"] - gem[0]["ts"]
        tail = (end[-1]["ts"] + end[-1]["dur"] - (gem[-1]["ts"] + gem[-1]["dur"])) if end else 0
        rows.append((period, sum(e["dur"] for e in gem), span, tail, len(gem)))
    med = [st.median(r[k] for r in rows) for k in range(4)]
    print(f"{os.path.basename(path)[3:-8]:28s} ref {st.median(ref):7.1f}  period {med[0]:7.1f} ({med[0]/st.median(ref):.3f})"
          f"  gemm sum {med[1]:7.1f} ({med[1]/st.median(ref):.3f})  span {med[2]:7.1f}  tail {med[3]:6.1f}  n_gemm {rows[0][4]}")
