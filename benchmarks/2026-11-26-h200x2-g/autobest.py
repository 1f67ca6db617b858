import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'op':6} {'shape':18} {'auto':32} {'tp a/best':>9} {'best tp':>10} {'lat a/best':>10} {'best lat':>10} host_auto-choice_us")
for r in d['rows']:
    t = r['times_ms']
    out = []
    for mode in ('throughput', 'latency'):
        best = min(('sequential', 'decomposed', 'fused'), key=lambda i: t[i][mode] if i in t else 9e9)
        out.append((t['auto'][mode] / t[best][mode], best))
    ch = r['auto']['impl']
    hd = (t['auto']['host'] - t[ch]['host']) * 1e3 if ch in t else float('nan')
    print(f"{r['op']:6} {r['M']}x{r['K']}->{r['N']:<8} {r['auto']['label'][:32]:32} {out[0][0]:9.3f} {out[0][1]:>10} {out[1][0]:10.3f} {out[1][1]:>10} {hd:6.1f}")
