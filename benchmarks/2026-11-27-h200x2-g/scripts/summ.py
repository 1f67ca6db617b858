import json, glob, sys
runs = sorted(glob.glob(sys.argv[1] + "/bo*.json"))
data = {r: json.load(open(r)) for r in runs}
print("fused/limit tp | fused/seq lat | rel err"); print("shape".ljust(22), " ".join(r.split("/")[-1][:-5].ljust(22) for r in runs))
for k in range(max(len(d["rows"]) for d in data.values())):
    cells, row = [], ""
    for r in runs:
        if k >= len(data[r]["rows"]):
            cells.append("-"); continue
        x = data[r]["rows"][k]; t = {c: v["throughput"] for c, v in x["times_ms"].items()}
        l = {c: v["latency"] for c, v in x["times_ms"].items()}
        row = f'{x["M"]}x{x["K"]}->{x["N"]}'
        cells.append(f'{t["fused"]/t["limit"]:.3f} {l["fused"]/l["sequential"]:.3f} {x["rel_err"].get("fused", -1):.0e}')
    print(row.ljust(22), " ".join(c.ljust(22) for c in cells))
