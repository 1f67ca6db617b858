"""The tables of NOTES.md from this folder's JSON files: python3 scripts/summarize.py (from the folder)."""
import json, statistics as st

def first(row):  # the default config's ratio (the first of dispatch.GPU_CONFIGS)
    return list(row["cfg"].values())[0][0]

def best(row):
    return min(v[0] for v in row["cfg"].values())

print("## run1 / run3: the core against cuBLAS, best of the four configs (default)")
r1, r3 = json.load(open("run1/gemm29.json"))["rows"], json.load(open("run3/gemm.json"))["rows"]
for a, b in zip(r1, r3):
    print(f"| {a['tag']} | {a['M']}x{a['K']}->{a['N']} | {a['cublas_ms']:.3f} | {a['best4']:.3f} ({first(a):.3f}) | {b['best4']:.3f} ({first(b):.3f}) |")
for b in r3[len(r1):]:
    print(f"| {b['tag']} | {b['M']}x{b['K']}->{b['N']} | {b['cublas_ms']:.3f} | - | {b['best4']:.3f} ({first(b):.3f}) |")

def ab(files, label):
    runs = {k: json.load(open(v))["rows"] for k, v in files.items()}
    print(f"## {label}: stream-K (new) / HEAD (old), the default config's ratio to cuBLAS per run")
    for i, row in enumerate(next(iter(runs.values()))):
        new = [first(runs[k][i]) for k in runs if "new" in k]
        old = [first(runs[k][i]) for k in runs if "old" in k]
        print(f"| {row['tag']} | {row['M']}x{row['K']}->{row['N']} | {' '.join(f'{x:.3f}' for x in new)} | "
              f"{' '.join(f'{x:.3f}' for x in old)} | {st.median(new) / st.median(old):.3f} |")

ab({n: f"run2/gemm_{n}.json" for n in ("new1", "old1", "new2", "old2")}, "run2 (one H200)")
ab({n: f"run4/gemm_{n}.json" for n in ("new1", "old1", "new2", "old2")}, "run4 (one H100)")
ab({f"{g}{n}": f"run5/gemm_g{g}_{n}.json" for g in (0, 1) for n in ("new1", "old1", "new2", "old2")}, "run5 (two H200s, both GPUs)")

print("## run8: sequential with an activation, new (GEMM with bias, one activation pass) / old (fp32 epilogue); fused / sequential")
d = {n: json.load(open(f"run8/act_{n}.json")) for n in ("new1", "old1", "new2", "old2")}
for i, row in enumerate(d["new1"]):
    f = lambda n, k: d[n][i][k]
    print(f"| {row['M']}x{row['K']}->{row['n']} {row['act']} | "
          f"{f('new1','sequential_tp')/f('old1','sequential_tp'):.3f}, {f('new2','sequential_tp')/f('old2','sequential_tp'):.3f} | "
          f"{f('new1','triton_tp')/f('new1','sequential_tp'):.3f}, {f('new2','triton_tp')/f('new2','sequential_tp'):.3f} / "
          f"{f('new1','triton_lat')/f('new1','sequential_lat'):.3f}, {f('new2','triton_lat')/f('new2','sequential_lat'):.3f} | "
          f"{f('old1','triton_tp')/f('old1','sequential_tp'):.3f}, {f('old2','triton_tp')/f('old2','sequential_tp'):.3f} |")

print("## run9 (HEAD) and run10 (sequential's activation pass), one machine: fused, auto / sequential (tp, lat); sequential ms")
h, n = json.load(open("run9/act.json")), json.load(open("run10/act.json"))
for a, b in zip(h, n):
    q = lambda r, k: r[f"{k}_tp"] / r["sequential_tp"]
    l = lambda r, k: r[f"{k}_lat"] / r["sequential_lat"]
    print(f"| {a['M']}x{a['K']}->{a['n']} | {a['act']} | {q(a,'fused'):.3f} / {l(a,'fused'):.3f} | {q(a,'auto'):.3f} / {l(a,'auto'):.3f} | "
          f"{a['sequential_tp']:.3f} | {q(b,'fused'):.3f} / {l(b,'fused'):.3f} | {q(b,'auto'):.3f} / {l(b,'auto'):.3f} | {b['sequential_tp']:.3f} |")
