"""Fused GEMM-AllReduce against sequential and the limit, per profile run of splits_profile.py (in run order).
    python3 summarize_splits.py RESULT_DIR"""
import glob, json, os, sys
def start_second(path):  # ar_splits<N>-<the run's start second>/profile.json
    return int(os.path.basename(os.path.dirname(path)).rsplit("-", 1)[1])


for f in sorted(glob.glob(sys.argv[1] + "/ar_splits*/profile.json"), key=start_second):
    d = json.load(open(f))
    print(f.split("/")[-2])
    for r in d["rows"]:
        t = r["times_ms"]
        print(f'  {r["M"]:6} {r["K"]:5} {r["N"]:5} seq {t["sequential"]["throughput"]:.3f} fused {t["fused"]["throughput"]:.3f} '
              f'f/s tp {t["fused"]["throughput"]/t["sequential"]["throughput"]:.3f} lat {t["fused"]["latency"]/t["sequential"]["latency"]:.3f} f/limit {r["vs_limit"]["fused"]:.3f}')
