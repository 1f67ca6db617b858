"""Per preset and token count: fused / limit range, entries (GEMM >= 0.5 ms) within 1.03x, fused/seq and fused/torch's in both modes."""
import json, sys
sys.path.insert(0, ".")
from fluxlite.profile.presets import model_shapes
d = json.load(open(sys.argv[1]))
rows = {(r["op"], r["M"], r["K"], r["N"]): r for r in d["rows"]}
over = {}
tot = {"ag": [0, 0], "rs": [0, 0]}
for model in ("llama3-8b", "llama3-70b", "qwen2.5-72b", "gpt3-175b"):
    for tokens in (4096, 8192, 16384):
        line = [f"{model:12} {tokens:6}"]
        fs, ft = [], []
        for op in ("ag", "rs"):
            vl, n, k = [], 0, 0
            for s in model_shapes(model, 2, tokens):
                if s.op != {"ag": "ag_gemm", "rs": "gemm_rs"}[op]:
                    continue
                r = rows.get((s.op, s.M, s.K, s.N))
                if r is None or r["vs_limit"].get("fused") is None:
                    continue
                v = r["vs_limit"]["fused"]; vl.append(v)
                t = r["times_ms"]
                if t["gemm"]["throughput"] >= 0.5:
                    n += 1; k += v <= 1.03
                    if v > 1.03: over[(op, s.M, s.K, s.N)] = v
                    for m in ("throughput", "latency"):
                        fs.append(t["fused"][m] / t["sequential"][m]); ft.append(t["fused"][m] / t["torch_symm_mem"][m])
            tot[op][0] += k; tot[op][1] += n
            line.append(f"{op} {min(vl):.3f}-{max(vl):.3f} {k}/{n}" if vl else f"{op} -")
        if fs:
            line.append(f"f/seq<=0.5ms-shapes max {max(fs):.3f} f/torch max {max(ft):.3f}")
        print("  ".join(line))
print("totals", tot)
print("over", {k: round(v, 3) for k, v in over.items()})
print("measured", len(d["rows"]), "of", d["meta"].get("shapes"))
