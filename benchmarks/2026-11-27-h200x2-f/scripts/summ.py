import json, glob, sys
runs = sorted(glob.glob(sys.argv[1] + "/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
for mode in ("throughput", "latency"):
    print(f"fused/limit, splits/cublas ({mode})"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(14) for r in runs))
    for k in range(min(len(d["rows"]) for d in data.values())):
        cells = []
        for r in runs:
            x = data[r]["rows"][k]; t = {c: v[mode] for c, v in x["times_ms"].items()}
            row = f'{x["M"]}x{x["K"]}->{x["N"]}'
            cells.append(f'{t["fused"]/t["limit"]:.3f}/{t["splits"]/t["cublas"]:.3f}')
        print(row.ljust(22), " ".join(c.ljust(14) for c in cells))
print("rel_err fused (max over runs):", [max(data[r]["rows"][k]["rel_err"].get("fused", -1) for r in runs) for k in range(len(data[runs[0]]["rows"]))])
