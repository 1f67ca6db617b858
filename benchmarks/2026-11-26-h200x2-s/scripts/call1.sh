#!/usr/bin/env bash
# GPU tests of the head, auto's per-round bounds on the GPU at 12 new shapes, replays against eager.
R=/tmp/res19a; source .scratch/s19/common.sh
: > $R/gpu_tests.log
for f in tests/test_gpu_graphs.py tests/test_gpu_cublaslt.py tests/test_gpu_gemm_ar.py tests/test_profile_cli.py; do
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 $f 2>&1 | tail -4 | tee -a $R/gpu_tests.log
done
echo "tests done at ${SECONDS}s"
export FLUXLITE_CACHE_DIR=$R/cache
S3="--shape rs:4,5120,3072 --shape ag:2,6144,4096 --shape rs:40,4096,7168 --shape ag:96,5632,2560 --shape rs:320,3584,6656 --shape ag:512,2816,8192 --shape rs:896,7168,3072 --shape ag:1792,4608,3584 --shape rs:2560,6400,2816 --shape ag:4608,2560,5376 --shape rs:7680,4352,4608 --shape ag:11264,3072,2560"
timeout 170 python3 -m fluxlite.profile --shape rs:2048,4096,4096 $S3 --nproc 2 --impls sequential,decomposed,fused,auto --rounds 9 --tune \
  --time-limit 150 --no-progress --out $R/auto_s3 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_s3.log; echo "auto_s3 rc=$? at ${SECONDS}s"
python3 - <<'PY'
import json
d = json.load(open("/tmp/res19a/auto_s3/profile.json"))
for r in d["rows"]:
    ab = r.get("auto_vs_best") or {}; bb = r.get("auto_vs_best_bounds") or {}
    f = lambda m: f'{ab.get(m, float("nan")):.3f} [{",".join(f"{x:.3f}" for x in bb.get(m) or [])}]'
    print(f'{r["op"][:6]:6} {r["M"]:6} {r["K"]:5} {r["N"]:5} tp {f("throughput")} lat {f("latency")} | {r["auto"]["label"]}')
PY
timeout 200 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/bench_graphs.json 2>&1 \
  | grep -v '^W1\|Warning\|enable_symm' > $R/bench_graphs.log; echo "graphs rc=$? at ${SECONDS}s"; tail -14 $R/bench_graphs.log
