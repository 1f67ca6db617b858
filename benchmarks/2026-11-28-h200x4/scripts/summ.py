import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f + "/profile.json"))
    print(f, d["meta"].get("device", ""), d["meta"].get("world_size", ""))
    for r in d["rows"]:
        t = {k: v["throughput"] for k, v in r["times_ms"].items()}
        tl = {k: v["latency"] for k, v in r["times_ms"].items()}
        ts = t.get("torch_symm_mem", float("nan")); tsl = tl.get("torch_symm_mem", float("nan"))
        print(f'{r["op"][:7]:7s} {r["M"]:5d}x{r["K"]:5d}->{r["N"]:5d} {",".join(r["names"]):16s} {r["flops"]:.1e} gemm {t["gemm"]:.3f} '
              f'f/lim {t["fused"]/t["limit"]:.3f} f/seq {t["fused"]/t["sequential"]:.3f}/{tl["fused"]/tl["sequential"]:.3f} '
              f'f/torch {t["fused"]/ts:.3f}/{tl["fused"]/tsl:.3f} copy/gemm {t["copy"]/t["gemm"]:.2f}')
