#!/usr/bin/env bash
# One GPU: the Triton GEMM core with the stream-K tail (new) against without (old = HEAD's fluxlite), alternating; kernel tests.
R=/tmp/res29b; source .scratch/s29/common.sh
OLD=$PWD/.scratch/s29/old:$PYTHONPATH
for n in new1 old1 new2 old2; do
  P=$PYTHONPATH; [[ $n == old* ]] && P=$OLD
  PYTHONPATH=$P timeout 200 python3 .scratch/s29/gemm29b.py $R/gemm_$n.json 2>&1 | grep -v Warning > $R/gemm_$n.log; echo "gemm $n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - $R <<'PY'
import json, sys
R = sys.argv[1]
d = {n: json.load(open(f"{R}/gemm_{n}.json"))["rows"] for n in ("new1", "old1", "new2", "old2")}
for i, row in enumerate(d["new1"]):
    def best(n): r = d[n][i]; return min(v[0] for v in r["cfg"].values())
    def dflt(n): r = d[n][i]; return list(r["cfg"].values())[0][0]
    errs = max((v[1] for n in d for v in d[n][i]["cfg"].values() if isinstance(v[1], float)), default=float("nan"))
    print(f"{row['tag']:5s} {row['M']}x{row['K']}->{row['N']} cublas {row['cublas_ms']:.3f} best new {best('new1'):.3f} {best('new2'):.3f} old {best('old1'):.3f} {best('old2'):.3f} | default new {dflt('new1'):.3f} {dflt('new2'):.3f} old {dflt('old1'):.3f} {dflt('old2'):.3f} | maxerr {errs:.1e}")
PY
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_epilogue.py -k one_gpu > $R/t_epilogue.log 2>&1; echo "epilogue one_gpu rc=$? at ${SECONDS}s"; tail -3 $R/t_epilogue.log
