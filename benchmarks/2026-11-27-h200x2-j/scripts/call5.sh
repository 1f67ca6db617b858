#!/usr/bin/env bash
# Two GPUs, one process each at a time: the Triton GEMM core with the stream-K tail (new) against HEAD's (old),
# alternating, GPU 0 new-old-new-old and GPU 1 old-new-old-new, at the same time.
R=/tmp/res29e; source .scratch/s29/common.sh
OLD=$PWD/.scratch/s29/old:$PYTHONPATH
NEW=$PYTHONPATH
seq_on() { local gpu=$1; shift; for n in "$@"; do
  P=$NEW; [[ $n == old* ]] && P=$OLD
  CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$P timeout 100 python3 .scratch/s29/gemm29c.py $R/gemm_g${gpu}_$n.json 2>&1 | grep -v Warning > $R/gemm_g${gpu}_$n.log
  echo "gpu $gpu $n rc=${PIPESTATUS[0]} at ${SECONDS}s"; done; }
seq_on 0 new1 old1 new2 old2 & seq_on 1 old1 new1 old2 new2 & wait
python3 - $R <<'PY'
import json, sys, statistics as st
R = sys.argv[1]
runs = {(g, n): json.load(open(f"{R}/gemm_g{g}_{n}.json"))["rows"] for g in (0, 1) for n in ("new1", "old1", "new2", "old2")}
rows0 = runs[(0, "new1")]
for i, row in enumerate(rows0):
    def r(g, n): return list(runs[(g, n)][i]["cfg"].values())[0][0]
    new = [r(g, n) for g in (0, 1) for n in ("new1", "new2")]; old = [r(g, n) for g in (0, 1) for n in ("old1", "old2")]
    print(f"{row['tag']:5s} {row['M']}x{row['K']}->{row['N']:<6} cublas {row['cublas_ms']:.3f} new " + " ".join(f"{x:.3f}" for x in new)
          + " old " + " ".join(f"{x:.3f}" for x in old) + f" | median new/old {st.median(new) / st.median(old):.3f}")
PY
