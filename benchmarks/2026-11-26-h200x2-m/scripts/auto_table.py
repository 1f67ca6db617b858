"""auto / best of sequential, decomposed, fused per mode, per shape, from profile.json files."""
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    print(path)
    tps, lats = [], []
    for r in d["rows"]:
        t = r["times_ms"]; a = r["auto"] if isinstance(r["auto"], dict) else {}
        ab = r["auto_vs_best"] or {}
        modes = a.get("modes", {})
        lat_f = t["fused"]["latency"] if "fused" in t else float("nan")
        print(f'  {r["op"]:8s} {r["M"]:6d}x{r["K"]:6d}->{r["N"]:6d}  tp {ab.get("throughput", float("nan")):.3f} lat {ab.get("latency", float("nan")):.3f}'
              f'   lat ms seq {t["sequential"]["latency"]:.3f} fused {lat_f:.3f} auto {t["auto"]["latency"]:.3f}'
              f'  both={a.get("label")} thr={modes.get("throughput")} lat={modes.get("latency")}')
        tps.append(ab.get("throughput")); lats.append(ab.get("latency"))
    ok = lambda v: sum(1 for x in v if x is not None and x <= 1.02)
    print(f"  within 1.02: tp {ok(tps)}/{len(tps)}, lat {ok(lats)}/{len(lats)}; max tp {max(tps):.3f} lat {max(lats):.3f}")
