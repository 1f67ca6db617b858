"""The per-preset table of a profile of every preset shape (the shapes given by --shape, so the rows carry
no pass names): python preset_table.py profile.json"""
import json, sys
sys.path.insert(0, ".")
from fluxlite.profile.presets import model_shapes

rows = {(r["op"], r["M"], r["K"], r["N"]): r for r in json.load(open(sys.argv[1]))["rows"]}
print("| model | tokens | AG fused / limit | within 1.03× (GEMM ≥ 0.5 ms) | GEMM-RS fused / limit | within 1.03× (GEMM ≥ 0.5 ms) | fused / seq, tp and latency | fused / torch's, tp and latency |")
print("| --- | ---: | --- | ---: | --- | ---: | --- | --- |")
for model in ("llama3-8b", "llama3-70b", "qwen2.5-72b", "gpt3-175b"):
    for tokens in (4096, 8192, 16384):
        cells, seq, tor = [], [], []
        for op in ("ag_gemm", "gemm_rs"):
            got = [rows[k] for s in model_shapes(model, 2, tokens) if (k := (s.op, s.M, s.K, s.N)) in rows and s.op == op]
            vs = [r["times_ms"]["fused"]["throughput"] / r["limit_ms"] for r in got]
            big = [v for v, r in zip(vs, got) if r["times_ms"]["gemm"]["throughput"] >= 0.5]
            cells += [f"{min(vs):.3f}–{max(vs):.3f}" if vs else "–", f"{sum(v <= 1.03 for v in big)} of {len(big)}"]
            for r in got:
                t = r["times_ms"]
                seq += [t["fused"][m] / t["sequential"][m] for m in ("throughput", "latency")] if "sequential" in t else \
                       [1 / r["speedup_vs_sequential"]["fused"][m] for m in ("throughput", "latency")]
                if "torch_symm_mem" in t:
                    tor += [t["fused"][m] / t["torch_symm_mem"][m] for m in ("throughput", "latency")]
        print(f"| {model} | {tokens} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {min(seq):.2f}–{max(seq):.2f} | "
              f"{min(tor):.2f}–{max(tor):.2f} |")
