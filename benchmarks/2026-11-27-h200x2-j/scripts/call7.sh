#!/usr/bin/env bash
# Two GPUs: sequential AG-GEMM with an activation, the GEMM with its bias then one activation pass (new) against the
# fp32 epilogue on the product (old = HEAD's fluxlite), and the fused call (Triton kernel) beside each, alternating.
R=/tmp/res29g; source .scratch/s29/common.sh
OLD=$PWD/.scratch/s29/old:$PYTHONPATH
for n in new1 old1 new2 old2; do
  P=$PYTHONPATH; [[ $n == old* ]] && P=$OLD
  NAMES=triton,sequential PYTHONPATH=$P timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s29/act.py $R/act_$n.json 2>&1 | grep -v '^W1\|Warning\|warn\|return func' > $R/act_$n.log; echo "act $n rc=${PIPESTATUS[0]} at ${SECONDS}s"
done
python3 - $R <<'PY'
import json, sys
R = sys.argv[1]
d = {n: json.load(open(f"{R}/act_{n}.json")) for n in ("new1", "old1", "new2", "old2")}
for i, row in enumerate(d["new1"]):
    f = lambda n, k: d[n][i][k]
    print(f"{row['M']}x{row['K']}->{row['n']} {row['act']:6s} seq new/old tp {f('new1','sequential_tp')/f('old1','sequential_tp'):.3f} {f('new2','sequential_tp')/f('old2','sequential_tp'):.3f} lat {f('new1','sequential_lat')/f('old1','sequential_lat'):.3f} {f('new2','sequential_lat')/f('old2','sequential_lat'):.3f}"
          f" | fused/seq new tp {f('new1','triton_tp')/f('new1','sequential_tp'):.3f} {f('new2','triton_tp')/f('new2','sequential_tp'):.3f} lat {f('new1','triton_lat')/f('new1','sequential_lat'):.3f} {f('new2','triton_lat')/f('new2','sequential_lat'):.3f}"
          f" | fused/seq old tp {f('old1','triton_tp')/f('old1','sequential_tp'):.3f} {f('old2','triton_tp')/f('old2','sequential_tp'):.3f} lat {f('old1','triton_lat')/f('old1','sequential_lat'):.3f} {f('old2','triton_lat')/f('old2','sequential_lat'):.3f} | seq ms new {f('new1','sequential_tp'):.3f} old {f('old1','sequential_tp'):.3f}")
PY
